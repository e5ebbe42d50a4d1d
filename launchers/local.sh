#!/usr/bin/env bash
# This host: compose, check, plan and launch (msrun for several local processes).
# By hand:  launchers/local.sh parallel=dp2 hardware=cpu_2proc
set -euo pipefail
exec python -m pretrain "$@"

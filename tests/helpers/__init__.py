"""Code the tests share that is not a fixture (fixtures live in the conftest.py files): the one way to
run the command line (cli), the checkout and its config groups (repo), the shrunken models (models),
a free port (net), fake run directories (rundir_fakes), the data-parallel equivalence worker, and
what a fast test and its slow (e2e) half both build: small corpora and data configs (data_files,
data_cli, ray_corpus, verified_cache, files_run), a loader's realised mix (loader_shares), a stand-in
training step (toy_trainer), runs and run dirs (status_run, resilience_run, elastic_run), launch
stand-ins and checks (launch_stand_ins, launch_checks, mindformers_load) and the test data of single
features (own_option, shown_commands, console_stream, packed_rows)."""

"""The job controller's parts that need no cluster: the progress watchdog (no new step), the tree
tag that finds a node's processes after setsid, and the scheduler's failure report."""
import os
import subprocess
import sys

from pretrain.launch import tree


def test_a_tagged_tree_is_found_after_setsid_and_killed_whole(tmp_path):
    tag = tree.new_tag()
    # a parent and a child in a session of its own (as msrun starts a worker), both tagged
    proc = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(['sleep', "
                             "'600'], start_new_session=True); print('up', flush=True); time.sleep(600)"],
                            env={**os.environ, tree.TAG_ENV: tag}, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "up\n"
    assert len(tree.tagged([tag])) == 2 and tree.tagged([tree.new_tag()]) == []
    assert tree.kill_tagged([tag]) == []
    proc.wait()
    assert tree.tagged([tag]) == []

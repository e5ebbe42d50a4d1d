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


def test_a_process_caught_in_exec_still_shows_its_environment():
    # Popen returns once exec() has begun; for about a millisecond after that the kernel shows an empty
    # /proc/<pid>/environ (a CI run once found one of two tagged processes this way). A plain read
    # right after Popen sees it in several percent of tries; tree.environ waits it out.
    tag = tree.new_tag()
    for _ in range(100):
        proc = subprocess.Popen(["sleep", "60"], env={**os.environ, tree.TAG_ENV: tag})
        try:
            assert f"{tree.TAG_ENV}={tag}".encode() in tree.environ(proc.pid).split(b"\0")
        finally:
            proc.kill()
            proc.wait()

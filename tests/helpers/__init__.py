"""Code the tests share that is not a fixture (fixtures live in the conftest.py files): the one way to
run the command line (cli), the checkout and its config groups (repo), the shrunken models (models),
a free port (net), fake run directories (rundir_fakes) and the data-parallel equivalence worker."""

"""Studies: measurements behind single design choices, run one at a time from the repository's
root as ``python -m bench.studies.<name>`` (bench/README.md lists them). Unlike the harness
(``python -m bench``) they compare ways of doing one thing, not pylmq against other servers."""

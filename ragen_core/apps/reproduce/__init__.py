"""`ragen reproduce`: the paper's four findings as a small-scale study anyone can rerun (docs/reproduction.md).

- :mod:`ragen_core.apps.reproduce.study`: the envs (collapse-prone and learning configs), arms and seeds; which run
  measures which finding.
- :mod:`ragen_core.apps.reproduce.runner`: local worker processes or Ray tasks; resumable run folders; run records
  (validation, in-batch MI and held-out probe curves).
- :mod:`ragen_core.apps.reproduce.analysis`: the outcomes and verdict rules fixed in advance, paired comparisons with
  their detectable effects, within-env rank correlations with a cluster bootstrap over seeds, the four findings.
- :mod:`ragen_core.apps.reproduce.report`: ``reproduction.md``, its figures and ``results.json``.
"""

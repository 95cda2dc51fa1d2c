"""`ragen reproduce`: the paper's four findings as a small-scale study anyone can rerun (docs/reproduction.md).

- :mod:`ragen_core.reproduce.study`: the arms, envs and seeds; which run measures which finding.
- :mod:`ragen_core.reproduce.runner`: local worker processes or Ray tasks; resumable run folders.
- :mod:`ragen_core.reproduce.analysis`: Spearman correlations, intervals and the findings from run records.
- :mod:`ragen_core.reproduce.report`: ``reproduction.md``, its figures and ``results.json``.
"""

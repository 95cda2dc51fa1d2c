"""verl adapter (``pip install ragen2[verl]``): SNR-aware filtering, MI collapse metrics and ``ragen/`` envs in verl.

- :mod:`~ragen_core.integrations.verl.adapter`: :func:`register` (the Ray worker set-up hook) and the
  ``ragen_snr`` advantage estimator; verl is imported only inside :func:`register`
- :mod:`~ragen_core.integrations.verl.trainer`, :mod:`~ragen_core.integrations.verl.agent`: the glue that
  subclasses verl (imported by :func:`register`, after the version check)
- :mod:`~ragen_core.integrations.verl.core`, :mod:`~ragen_core.integrations.verl.mi`,
  :mod:`~ragen_core.integrations.verl.env`: the verl-free logic (filtering, removal, advantages, MI metrics,
  the env as a chat), tested on CPU
- :mod:`~ragen_core.integrations.verl.version`: the supported verl range

Imports point one way: adapter -> trainer / agent -> core / mi / env / version. The package's names
(``__all__`` included) are those of :mod:`~ragen_core.integrations.verl.adapter`, loaded on first use (so
importing a verl-free module loads nothing else);
``ragen_core.integrations.verl.register`` is the name to give Ray's ``worker_process_setup_hook``.
"""

from ragen_core.integrations._lazy import forward_to

__getattr__ = forward_to(__name__, "ragen_core.integrations.verl.adapter")

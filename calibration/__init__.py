"""Calibration: fit the kernel latency model to measured kernel tables and validate it.

Modules (one concept each):

* :mod:`calibration.reader` - measured tables -> typed, canonical DataFrames
* :mod:`llmplan.sim.kernel_calibration.gpu_features` - the GPU figures a model uses; catalog look-up
* :mod:`llmplan.sim.kernel_calibration.features` - physical terms and residual features per operator family
* :mod:`llmplan.sim.kernel_calibration.physics` - the base model (launch floor + soft roofline with waves, L2)
* :mod:`llmplan.sim.kernel_calibration.gbt` - boosted oblivious trees in numpy, JSON-serialisable
* :mod:`llmplan.sim.kernel_calibration.family_model` - per dtype group: base parameters x residual ensemble
* :mod:`llmplan.sim.kernel_calibration.collectives` - measured collective curves and the alpha-beta model
* :mod:`llmplan.sim.kernel_calibration.crossgen` - the cross-gen tier (pooled over measured GPUs)
* :mod:`llmplan.sim.kernel_calibration.calib_file` - the portable calibration file (JSON)
* :mod:`calibration.fit` - ``llmplan calibrate``'s fit; :mod:`calibration.cli_calibrate`
* :mod:`calibration.splits` - random / grouped / holdout splits
* :mod:`llmplan.sim.kernel_calibration.predict`, :mod:`calibration.validate_kernels`, :mod:`calibration.cli_validate`
  - ``llmplan validate kernels``

The kernel model the simulator uses is :mod:`sim.calibrated`.
"""

"""The cross-gen tier's kernel rules: which kernel an engine runs depends on the GPU's
architecture and on the engine's release, so a member GPU's fitted group is pooled only where it
timed the kernel the *target* runs.

The pool keys a member's fitted models by engine and dtype. Three rules, each from the engines'
source or the tables' own ``kernel_source`` labels (never from the target's latencies):

* **Architecture dispatch** (:data:`DISPATCH`): for (family, engine, dtype group), the
  architectures (:data:`llmplan.sim.kernel_calibration.crossgen_clock.ARCHITECTURE`, known from
  the catalog key) on which the engine runs another group's kernel. A target on such an
  architecture is answered by the pooled model of that group, the query rebuilt in that group's
  format (:class:`DispatchedGroupModel`); for a target that runs the dtype's own kernel, members
  on a listed architecture (whose group timed the other kernel) leave that group's pool.
  TensorRT-LLM MLA absorb matmuls with fp8 weights: on SM89/SM90 the activations are quantized
  (``fp8_batched_quantize_1x128_permute102``) and the fp8 block-scaling bmm runs; on SM100 the
  weights are dequantized to bf16 once at load and ``torch.bmm`` runs in bf16
  (``fp8_block_scaling_bmm_out`` in tensorrt_llm/_torch/modules/attention.py, NVIDIA/TensorRT-LLM;
  the B200 table's ``kernel_source`` is ``trtllm_bmm_out_dequant_bf16``, the other GPUs'
  ``trtllm_fp8_block_scaling_bmm_out``). Measured medians: B200 fp8 4.5 us = its bf16 4.5 us;
  H100/H200 fp8 10.4-13.3 us against bf16 5.2-5.6 us. Leave-one-GPU-out B200 MLA bmm 32.9 -> 9.8%
  (roofline 26.0%).
* **Members that ran an older release's kernel** (:data:`ENGINE_KERNELS`, :data:`TABLE_KERNELS`)
  leave that engine's pool: A100's SGLang 0.5.10 GDN decode table timed FLA's unpacked recurrent
  kernel, SGLang 0.5.14 runs the packed decode kernel.
* **Rows that name their kernel** (:func:`pool_engines`): a table row whose ``kernel_source`` is
  the kernel another engine runs is answered by that engine's pool (A100's SGLang 0.5.10 GDN
  decode rows by TensorRT-LLM's, which runs the same unpacked kernel): leave-one-GPU-out A100 GDN
  decode 28.2 -> 8.9% (roofline 21.6%). Queries name no kernel: the asked engine's pool, i.e. its
  current release's kernel.

docs/ACCURACY.md, "Cross-gen tier: the engines' kernel choice ... (session 13)".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from llmplan.sim.kernel_calibration import crossgen_clock
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.family_model import GroupModel
from llmplan.sim.kernel_calibration.gbt import GBTModel
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures

#: (family, engine, dtype group) -> (architectures, the group whose kernel runs there)
DISPATCH: dict[tuple[str, str, str], tuple[frozenset[str], str]] = {
    ("mla_bmm", "trtllm", "fp8"): (frozenset({"blackwell"}), "bf16"),
}

#: (family, engine) -> the kernel label the engine's current release runs (what a query, which
#: names no kernel, is answered with), and (family, engine, measured GPU) -> the label that GPU's
#: table ran where it differs (an older engine release: the A100 tables are SGLang 0.5.10, vLLM
#: 0.14, TensorRT-LLM 1.0; the other GPUs' SGLang 0.5.14, vLLM 0.24, TensorRT-LLM 1.3). A member
#: whose table ran another kernel than the engine's current one is left out of that engine's pool
#: (where any member remains): its model times a kernel the engine no longer runs.
ENGINE_KERNELS: dict[tuple[str, str], str] = {
    ("gdn_decode", "sglang"): "causal_conv1d_update+fused_recurrent_gated_delta_rule_packed_decode",
    ("gdn_decode", "vllm"): "causal_conv1d_update+fused_recurrent_gated_delta_rule_packed_decode",
    ("gdn_decode", "trtllm"): "causal_conv1d_update+fused_recurrent_gated_delta_rule",
}
TABLE_KERNELS: dict[tuple[str, str, str], str] = {
    ("gdn_decode", "sglang", "a100_sxm"): "causal_conv1d_update+fused_recurrent_gated_delta_rule",
}


def member_runs_engine_kernel(family: str, backend: str, gpu: str) -> bool:
    """False where ``gpu``'s table of ``backend`` ran another kernel than the engine's current one."""
    now = ENGINE_KERNELS.get((family, backend))
    ran = TABLE_KERNELS.get((family, backend, gpu))
    return now is None or ran is None or ran == now


#: family -> {kernel label (a table's ``kernel_source``) -> engines whose tables on the pooled
#: GPUs ran that kernel}: a row that names the kernel it ran is answered by the pool of an engine
#: that ran it (its own engine when that one did). Queries name no kernel: the asked engine's pool.
#: * Gated DeltaNet decode: SGLang 0.5.14 and vLLM 0.24 run FLA's packed decode kernel
#:   (``fused_recurrent_gated_delta_rule_packed_decode``), TensorRT-LLM 1.3 the unpacked
#:   ``fused_recurrent_gated_delta_rule``, which the A100 table's SGLang 0.5.10 ran too (the
#:   tables' ``kernel_source``, ../shared/measurements/<gpu>/gdn.csv.gz).
KERNEL_ENGINES: dict[str, dict[str, tuple[str, ...]]] = {}
for (_fam, _eng), _label in sorted(ENGINE_KERNELS.items()):
    _ks = KERNEL_ENGINES.setdefault(_fam, {})
    _ks[_label] = _ks.get(_label, ()) + (_eng,)


def pool_engines(family: str, backend: str, kernels: Any) -> np.ndarray:
    """Per row, the engine whose cross-gen pool answers a ``backend`` row that ran ``kernels``
    (its ``kernel_source`` labels; None / NaN: the row's own engine)."""
    table = KERNEL_ENGINES.get(family, {})
    out = np.full(len(kernels), backend, dtype=object)
    if not table:
        return out
    for i, k in enumerate(kernels):
        engines = table.get(k) if isinstance(k, str) else None
        if engines and backend not in engines:
            out[i] = engines[0]
    return out


def architecture(gpu: GPUFeatures | None) -> str | None:
    return None if gpu is None else crossgen_clock.ARCHITECTURE.get(gpu.key)


def runs_instead(family: str, backend: str, key: str, gpu: GPUFeatures | None) -> str | None:
    """The group whose kernel ``backend`` runs for a ``key`` query on ``gpu`` (None: its own)."""
    rule = DISPATCH.get((family, backend, key))
    arch = architecture(gpu)
    return rule[1] if rule is not None and arch is not None and arch in rule[0] else None


def rebuild(family: str, phys: F.Phys, key: str, group: str, gpu: GPUFeatures) -> F.Phys:
    """A ``key`` query's physical terms in ``group``'s format (only the families of
    :data:`DISPATCH`): tokens, heads and op from its features, the latent and nope widths from
    its FLOPs and bytes (as :func:`crossgen_kv_guard.bf16_kv_phys` does)."""
    if family != "mla_bmm":
        raise ValueError(f"no dispatch rebuild for family '{family}'")
    frame = np.ndim(phys.t_c) > 0
    ops = F.NP if frame else F.PY
    x = phys.x
    tokens, heads = ((np.exp2(np.asarray(x[i], dtype=np.float64)) if frame else 2.0 ** float(x[i])) for i in (0, 1))
    post = np.asarray(x[2], dtype=np.float64) if frame else float(x[2])
    prod = phys.flops / (2.0 * tokens * heads)                                        # nope x kv_lora
    total = (phys.nbytes - heads * prod * F.DTYPE_BYTES.get(key, 2.0)) / (2.0 * tokens * heads)  # nope + kv_lora
    root = np.sqrt(np.maximum(total * total - 4.0 * prod, 0.0))
    kv_lora = np.round((total + root) / 2.0)          # integer widths (ceil(kv_lora / 128) tiles)
    nope = np.round(prod / kv_lora)
    if not frame:
        kv_lora, nope = float(kv_lora), float(nope)
    return F.mla_bmm(tokens, heads, post, F.DTYPE_BYTES.get(group, 2.0),
                     gpu.peak(F.COMPUTE_DTYPE.get(group, group)), gpu, ops, kv_lora, nope)


@dataclass
class DispatchedGroupModel(GroupModel):
    """A pooled group answering queries of another dtype whose kernel the target runs as this
    group's (``inner``), each query rebuilt in ``group``'s format on ``target``."""

    inner: GroupModel | None = None
    family: str = ""
    key: str = ""           # the query's dtype group
    group: str = ""         # the group whose kernel runs
    target: GPUFeatures | None = None

    @staticmethod
    def of(inner: GroupModel, family: str, key: str, group: str, target: GPUFeatures) -> "DispatchedGroupModel":
        return DispatchedGroupModel(inner.base, None, inner.rows, inner.ranges, inner, family, key, group, target)

    def predict_frame(self, phys: F.Phys, gbt: GBTModel | None = None, use: Any = None) -> np.ndarray:
        assert self.inner is not None and self.target is not None
        return self.inner.predict_frame(rebuild(self.family, phys, self.key, self.group, self.target), gbt, use)

    def predict_one(self, phys: F.Phys, gbt: GBTModel | None = None) -> tuple[float, str]:
        assert self.inner is not None and self.target is not None
        return self.inner.predict_one(rebuild(self.family, phys, self.key, self.group, self.target), gbt)

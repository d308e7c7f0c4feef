"""One deployment = model x GPU x parallelism x precision x engine x replicas.

Validates the parallelism against the model and the hardware, and builds the kernel
model, step cost model and memory plan that the analytical screen and the
discrete-event simulator share.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.errors import InfeasibleDeployment
from llmplan.model_catalog.spec import ModelSpec
from llmplan.sim.kernels import KernelModel, RooflineKernelModel
from llmplan.sim.links import guard_topology
from llmplan.sim.memory import MemoryPlan, plan_memory
from llmplan.sim.step_model import AnalyticalStepModel
from llmplan.sim.types import EngineProfile, Parallelism, Precision

#: calibration names meaning "specification-only roofline defaults"
SPEC_ONLY = ("spec", "none", "roofline")


@dataclass(frozen=True)
class Deployment:
    model: ModelSpec
    gpu: GPUSpec
    par: Parallelism
    prec: Precision
    engine: EngineProfile
    replicas: int = 1

    @property
    def gpus_per_replica(self) -> int:
        return self.par.gpus

    @property
    def total_gpus(self) -> int:
        return self.par.gpus * self.replicas

    def label(self) -> str:
        ep = f" EP{self.par.ep}" if self.par.ep > 1 else ""
        dp = f" DP{self.par.dp}" if self.par.dp > 1 else ""
        return f"{self.replicas}x {self.gpu.key} TP{self.par.tp}{dp} PP{self.par.pp}{ep} {self.prec.weights}"


def parallelism_problem(model: ModelSpec, gpu: GPUSpec, par: Parallelism, prec: Precision) -> str | None:
    """Why this parallelism/precision cannot run, or None. Names the offending key.

    Layouts may span more GPUs than one scale-up domain (their collectives then cross the
    scale-out network, sim/links.py); attention DP (``dp``) needs a MoE model (dense DP ranks
    are independent replicas: use ``replicas``) and ``ep`` must divide the ``tp x dp`` GPUs
    of a stage (``moe_tp = tp x dp / ep``)."""
    if min(par.tp, par.pp, par.ep, par.dp) < 1:
        return "tp, pp, ep and dp must be >= 1"
    if model.num_attention_heads % par.tp:
        return f"tp={par.tp} does not divide the {model.num_attention_heads} attention heads"
    if par.pp > model.num_layers:
        return f"pp={par.pp} exceeds the {model.num_layers} layers"
    if par.ep > 1 and not model.is_moe:
        return f"ep={par.ep} on dense model {model.key}: expert parallelism needs a MoE model"
    if par.dp > 1 and not model.is_moe:
        return (f"dp={par.dp} (attention data parallelism) on dense model {model.key}: its DP ranks never "
                "synchronise; use replicas instead")
    if par.ep > 1:
        if par.stage_gpus % par.ep:
            group = f"tp={par.tp} x dp={par.dp}" if par.dp > 1 else f"tp={par.tp}"
            return f"ep={par.ep} must divide {group} (experts are sharded over the stage's GPUs)"
        assert model.moe is not None
        if model.moe.num_experts % par.ep:
            return f"ep={par.ep} does not divide the {model.moe.num_experts} experts"
    # 4-bit weights run weight-only (dequantised to bf16 in the GEMM) on GPUs without fp4
    # tensor cores, as vLLM's MXFP4/Marlin paths do on Hopper; fp8 needs fp8 tensor cores
    if prec.weights == "fp8" and not gpu.supports("fp8"):
        return f"precision=fp8 is not supported by {gpu.key} (no fp8 tensor cores)"
    if prec.kv_cache not in ("bf16", "fp16") and not gpu.supports(prec.kv_cache):
        return f"kv_cache_dtype={prec.kv_cache} is not supported by {gpu.key} (no {prec.kv_cache} tensor cores)"
    return None


def make_kernel_model(gpu: GPUSpec, backend: str, calibration: str | None) -> KernelModel:
    """Calibrated kernel model (default fit, or a given file), or spec-only roofline. On a
    PCIe host topology other than the measured box, collectives come from the link's roofline."""
    return guard_topology(_kernel_model(gpu, backend, calibration), gpu)


def _kernel_model(gpu: GPUSpec, backend: str, calibration: str | None) -> KernelModel:
    if calibration is not None and calibration.lower() in SPEC_ONLY:
        return RooflineKernelModel(gpu)
    try:
        from llmplan.sim.kernel_calibration.calib_file import DEFAULT_PATH
        from llmplan.sim.calibrated import kernel_model_for
    except ImportError:  # calibration not available in this build
        return RooflineKernelModel(gpu)
    if calibration is None and not DEFAULT_PATH.is_file():
        return RooflineKernelModel(gpu)
    return kernel_model_for(gpu, backend=backend, calibration=calibration)


def build(dep: Deployment, calibration: str | None = None, min_kv_tokens: int = 0,
          kernels: KernelModel | None = None) -> tuple[AnalyticalStepModel, MemoryPlan]:
    """Step cost model and memory plan for one replica. Raises InfeasibleDeployment."""
    problem = parallelism_problem(dep.model, dep.gpu, dep.par, dep.prec)
    if problem:
        raise InfeasibleDeployment(problem, key="deployment", fix="choose tp/pp/ep/dp/precision the model and GPU support")
    mem = plan_memory(dep.model, dep.gpu, dep.par, dep.prec, dep.engine, min_kv_tokens)
    km = guard_topology(kernels, dep.gpu) if kernels else make_kernel_model(dep.gpu, dep.engine.kernel_backend,
                                                                              calibration)
    return AnalyticalStepModel(dep.model, dep.gpu, dep.par, dep.prec, dep.engine, km), mem


def replica_limits(engine: EngineProfile, model: ModelSpec, longest_request_tokens: int) -> tuple[EngineProfile, int]:
    """(engine, max_model_len) for a simulated replica.

    Chunked-prefill engines accept the model's full context. Prefill-first engines (SGLang's
    default, vLLM v0) must fit a whole prompt in one iteration, so their token budget is
    raised to cover the workload's longest request (with 2x headroom, within the context)."""
    if engine.chunked_prefill:
        return engine, model.max_position_embeddings
    need = min(model.max_position_embeddings, max(engine.max_num_batched_tokens, 2 * longest_request_tokens))
    return replace(engine, max_num_batched_tokens=max(engine.max_num_batched_tokens, need)), need

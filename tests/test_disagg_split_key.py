"""The held-out split of disaggregated rows (calibration/disagg_row_labels.split_keys): two runs of
one decode deployment whose prefill pools are spelled TP 8 and attention DP 8 fall in one half;
every other row keeps its deployment key's half; genuinely different deployments (decode layout,
worker counts, prefill GPUs or EP) are not merged."""

from __future__ import annotations

import pandas as pd

from llmplan.calibration.disagg_row_labels import disagg_deployment_key, split_keys, tp_spelled_key
from llmplan.calibration.engine_fit import deployment_half
from llmplan.calibration.serving_disagg_rows import held_out, map_disagg_rows
from tests.test_serving_disagg_rows import row

#: the H200 TensorRT-LLM DeepSeek-V3 deployment of cfg303 / cfg590 (9 decode workers of TP 8, EP 8)
DS = {"backend": "trtllm", "backend_version": "0.8.1.post1", "model_path": "deepseek-ai/DeepSeek-V3",
      "system": "h200_sxm", "isl": 1024, "osl": 1024, "prefill_moe_tp_size": 1, "prefill_moe_ep_size": 8,
      "decode_moe_tp_size": 1, "decode_moe_ep_size": 8, "decode_tp_size": 8, "decode_num_workers": 9,
      "silicon_data_source": "x; silicon_concurrency=36"}
TP8 = {"prefill_tp_size": 8, "prefill_attention_dp_size": 1}
ADP8 = {"prefill_tp_size": 1, "prefill_attention_dp_size": 8}


def test_an_attention_dp_spelled_prefill_takes_its_tp_spelled_twins_key():
    a, b = row(**DS, **TP8), row(**DS, **ADP8)
    assert disagg_deployment_key(a) != disagg_deployment_key(b)     # the labels name two layouts
    assert tp_spelled_key(b) == disagg_deployment_key(a)
    assert split_keys([a, b]) == {0: disagg_deployment_key(a), 1: disagg_deployment_key(a)}
    # without the twin in the frame, a row keeps its own key (its half does not move)
    assert split_keys([b]) == {0: disagg_deployment_key(b)}
    # aggregated rows get no key
    assert split_keys([a, row(**DS, mode="agg")]) == {0: disagg_deployment_key(a)}


def test_other_differences_are_not_merged():
    b = row(**DS, **ADP8)
    for other in (row(**{**DS, "decode_tp_size": 1}, **TP8, decode_attention_dp_size=8),    # decode layout
                  row(**{**DS, "decode_num_workers": 3}, **TP8),                             # worker counts
                  row(**DS, prefill_tp_size=4, prefill_attention_dp_size=1),           # prefill GPUs
                  row(**{**DS, "prefill_moe_ep_size": 4}, **TP8)):                     # prefill EP
        assert split_keys([other, b])[1] == disagg_deployment_key(b)


def test_twin_runs_land_in_one_half_for_every_seed():
    twins = pd.DataFrame([row(id="cfg303", **DS, **TP8, silicon_ttft_ms=673.2, silicon_tpot_ms=13.39),
                          row(id="cfg590", **DS, **ADP8, silicon_ttft_ms=622.9, silicon_tpot_ms=13.38)])
    maps = map_disagg_rows(twins, {})
    assert all(m.case is not None for m in maps.values())
    for seed in range(16):
        assert held_out(maps[0], seed) == held_out(maps[1], seed)
        assert held_out(maps[0], seed) == (deployment_half(maps[0].case.deployment, seed) == 1)
    # the deployment keys alone split such a pair in some seeds (what the split key prevents)
    assert any(deployment_half(maps[0].case.deployment, s) != deployment_half(maps[1].case.deployment, s)
               for s in range(16))

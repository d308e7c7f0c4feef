"""A day of traffic: small profiles with a known optimum (optimizer/day_plan.py)."""

import math

import pytest

from llmplan.errors import ConfigError, UserError
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.optimizer import price_tiers
from llmplan.optimizer.day_plan import (DayCandidate, DayInfeasible, candidates_from_evaluations, plan_day,
                                        profile_from_rates, profile_from_trace, read_profile_csv)
from llmplan.optimizer.price_tiers import PriceTiers
from llmplan.optimizer.types import Candidate, Evaluation
from llmplan.sim.types import Parallelism, Precision

G = DayCandidate("g-tp1", "g", 1, 10.0, 4.0)  # 10 req/s per 1-GPU replica, $4/GPU-h on demand


def _one_peak(base: float = 20.0, peak: float = 50.0, hour: int = 23) -> list[float]:
    return [peak if h == hour else base for h in range(24)]


def test_flat_profile_equals_static_plan():
    tiers = {"g": PriceTiers("g", 4.0, reserved_usd_per_gpu_hour=2.5, spot_usd_per_gpu_hour=2.0,
                             spot_interruption_rate=0.25)}
    d = plan_day(profile_from_rates([40.0] * 24), [G], tiers, scale_up_s=600)
    assert d.cost_usd == pytest.approx(d.static_cost_usd)
    assert d.saving_usd == pytest.approx(0.0)
    # 4 reserved at $2.5/h ($10/h) beat 2 reserved + 3 spot ($11/h) and on-demand for a flat 40 req/s
    assert d.serving == {("g-tp1", "reserved"): (4,) * 24}
    assert d.cost_usd == pytest.approx(4 * 2.5 * 24)
    assert d.static_on_demand_cost_usd == pytest.approx(4 * 4.0 * 24)


def test_peak_hour_on_spot_base_on_reserved():
    # reserved $2.5 < on-demand $4 per hour; spot $2 interrupted 25%: $2.67 per expected replica-hour,
    # dearer than reserved all day, cheaper than on-demand for the peak hour
    tiers = {"g": PriceTiers("g", 4.0, 2.5, 2.0, 0.25)}
    d = plan_day(profile_from_rates(_one_peak()), [G], tiers, scale_up_s=0)
    assert d.serving[("g-tp1", "reserved")] == (2,) * 24
    spot = d.serving[("g-tp1", "spot")]
    assert spot[23] == 4 and sum(spot[:23]) == 0  # 0.75 x 4 x 10 = 30 req/s expected on top of 20
    assert ("g-tp1", "on_demand") not in d.serving
    assert d.cost_usd == pytest.approx(2 * 2.5 * 24 + 4 * 2.0)
    assert d.static_cost_usd == pytest.approx(5 * 2.5 * 24)  # 5 reserved carry the peak all day
    assert d.saving_usd == pytest.approx(5 * 2.5 * 24 - (2 * 2.5 * 24 + 4 * 2.0))
    assert all(c >= r - 1e-9 for c, r in zip(d.capacity_rps(), d.profile.rate_rps))


def test_peak_hour_on_demand_without_spot():
    tiers = {"g": PriceTiers("g", 4.0, reserved_usd_per_gpu_hour=2.5)}
    d = plan_day(profile_from_rates(_one_peak()), [G], tiers, scale_up_s=0)
    assert d.serving[("g-tp1", "reserved")] == (2,) * 24
    assert d.serving[("g-tp1", "on_demand")] == (0,) * 23 + (3,)
    assert d.cost_usd == pytest.approx(2 * 2.5 * 24 + 3 * 4.0)


def test_reserved_dearer_than_on_demand_is_not_used():
    tiers = {"g": PriceTiers("g", 4.0, reserved_usd_per_gpu_hour=4.5)}
    d = plan_day(profile_from_rates(_one_peak()), [G], tiers, scale_up_s=0)
    assert ("g-tp1", "reserved") not in d.serving
    assert d.cost_usd == pytest.approx((2 * 23 + 5) * 4.0)


def test_min_replicas_kept_in_idle_intervals():
    rates = [0.0] * 6 + [25.0] * 12 + [0.0] * 6
    d = plan_day(profile_from_rates(rates), [G], {}, scale_up_s=0, min_replicas=2)
    total = [sum(xs[i] for xs in d.serving.values()) for i in range(24)]
    assert total == [2] * 6 + [3] * 12 + [2] * 6
    assert d.cost_usd == pytest.approx((2 * 12 + 3 * 12) * 4.0)  # catalog on-demand price


def test_scale_up_lead_pays_the_interval_before():
    rates = _one_peak(hour=10)
    d = plan_day(profile_from_rates(rates), [G], {}, scale_up_s=1800)
    serving, running = d.serving[("g-tp1", "on_demand")], d.running[("g-tp1", "on_demand")]
    assert serving[10] == 5 and serving[9] == 2
    assert running[9] == 5  # the 3 extra replicas start 30 min before hour 10
    assert running[11] == 2
    assert d.cost_usd == pytest.approx((2 * 24 + 3 * 2) * 4.0)
    d0 = plan_day(profile_from_rates(rates), [G], {}, scale_up_s=0)
    assert d0.cost_usd == pytest.approx((2 * 24 + 3) * 4.0)


def test_scale_up_lead_wraps_around_a_cyclic_day():
    rates = _one_peak(hour=0)
    cyc = plan_day(profile_from_rates(rates), [G], {}, scale_up_s=600, cyclic=True)
    assert cyc.running[("g-tp1", "on_demand")][23] == 5
    once = plan_day(profile_from_rates(rates), [G], {}, scale_up_s=600, cyclic=False)
    assert once.running[("g-tp1", "on_demand")][23] == 2
    assert cyc.cost_usd - once.cost_usd == pytest.approx(3 * 4.0)


def test_availability_too_small_is_a_clear_error():
    with pytest.raises(DayInfeasible) as err:
        plan_day(profile_from_rates(_one_peak()), [G], {}, max_gpus={"g": 4})
    msg = str(err.value)
    assert "interval 23" in msg and "50 req/s" in msg and "g <= 4 GPUs" in msg


def test_lead_needs_gpus_twice_when_availability_is_tight():
    # 5 GPUs carry the peak, but a replica starting for the peak holds a GPU while the
    # interval before still needs its own 5: infeasible with a lead, feasible without
    rates = [50.0 if h % 2 else 20.0 for h in range(4)]
    plan_day(profile_from_rates(rates), [G], {}, scale_up_s=0, max_gpus={"g": 5})
    rates = [50.0, 20.0, 50.0, 50.0]
    plan_day(profile_from_rates(rates), [G], {}, scale_up_s=600, max_gpus={"g": 5})  # 20 -> 50 lead: 5 GPUs suffice
    with pytest.raises(DayInfeasible, match="scale-up"):
        plan_day(profile_from_rates([50.0, 50.0]), [G, DayCandidate("g-big", "g", 4, 30.0, 4.0)], {},
                 scale_up_s=600, max_gpus={"g": 5}, min_replicas=6)


def test_mixes_gpu_types_and_respects_capacity_every_interval():
    small = DayCandidate("h-tp1", "h", 1, 3.0, 1.0)
    rates = [5.0, 17.0, 33.0, 12.0, 0.5, 41.0]
    tiers = {"g": PriceTiers("g", 4.0, 3.0), "h": PriceTiers("h", 1.5, spot_usd_per_gpu_hour=0.6, spot_interruption_rate=0.1)}
    d = plan_day(profile_from_rates(rates, interval_s=600), [G, small], tiers, scale_up_s=120)
    assert all(c >= r - 1e-6 for c, r in zip(d.capacity_rps(), rates))
    assert d.cost_usd <= d.static_cost_usd + 1e-9
    df = d.frame()
    assert list(df["rate_rps"]) == rates and len(df) == 6
    assert df["cost_usd"].sum() == pytest.approx(d.cost_usd)
    assert {"interval", "capacity_rps", "gpus_running", "cost_usd"} <= set(df.columns)
    assert d.as_dict()["saving_usd"] == pytest.approx(round(d.saving_usd, 4))


def test_trace_binned_into_intervals():
    ts = [10.0, 20.0, 30.0, 3700.0, 7100.0]
    p = profile_from_trace(ts, interval_s=3600.0)
    assert p.rate_rps == (3 / 3600.0, 2 / 3600.0) and p.horizon_s == 7200.0
    with pytest.raises(UserError, match="past the horizon"):
        profile_from_trace(ts, interval_s=3600.0, horizon_s=7000.0)


def test_csv_profile(tmp_path):
    f = tmp_path / "day.csv"
    f.write_text("t_start_s,rate_rps\n0,10\n60,12.5\n120,8\n")
    p = read_profile_csv(f)
    assert p.duration_s == (60.0, 60.0, 60.0) and p.rate_rps == (10.0, 12.5, 8.0)
    (tmp_path / "bad.csv").write_text("time,rps\n0,1\n")
    with pytest.raises(UserError) as err:
        read_profile_csv(tmp_path / "bad.csv")
    assert err.value.key == "day.profile" and "t_start_s" in str(err.value)
    (tmp_path / "back.csv").write_text("t_start_s,rate_rps\n0,1\n0,2\n")
    with pytest.raises(UserError, match="duration 0.0 s") as err:
        read_profile_csv(tmp_path / "back.csv")
    assert "increase" in err.value.fix


def test_price_tiers_from_config_validate_keys():
    t = price_tiers.from_mapping({"h100_sxm": {"reserved_usd_per_gpu_hour": 2.72, "source": "Hyperstack 2026-08-26"}},
                                 on_demand_defaults={"h100_sxm": 3.2, "a100_sxm": 1.5})
    assert t["h100_sxm"].tiers() == ("reserved", "on_demand") and t["a100_sxm"].tiers() == ("on_demand",)
    with pytest.raises(ConfigError) as err:
        price_tiers.from_mapping({"h100_sxm": {"spot_usd_per_gpu_hour": -1}})
    assert err.value.key == "day.price_tiers.h100_sxm.spot_usd_per_gpu_hour"
    with pytest.raises(ConfigError) as err:
        price_tiers.from_mapping({"h100_sxm": {"on_demand_usd_per_gpu_hour": 3, "spot_interruption_rate": 1.0}})
    assert err.value.key == "day.price_tiers.h100_sxm.spot_interruption_rate"
    with pytest.raises(ConfigError, match="unknown"):
        price_tiers.from_mapping({"h100_sxm": {"spot_price": 1}})


def test_candidates_from_planner_evaluations():
    ok = Evaluation(Candidate(get_gpu("h100_sxm"), Parallelism(2), Precision(), 256, 3.0), "ok", capacity_rps=8.0,
                    sim_capacity_rps=6.0)
    bad = Evaluation(Candidate(get_gpu("a100_sxm"), Parallelism(1), Precision(), 256, 1.5), "slo", capacity_rps=0.0)
    (c,) = candidates_from_evaluations([ok, bad])
    assert (c.gpu, c.gpus_per_replica, c.capacity_rps_per_replica, c.usd_per_gpu_hour) == ("h100_sxm", 2, 6.0, 3.0)


def test_plot_has_a_png(tmp_path):
    d = plan_day(profile_from_rates(_one_peak()), [G], {"g": PriceTiers("g", 4.0, 2.5)}, scale_up_s=0)
    d.plot(tmp_path / "day.png")
    assert (tmp_path / "day.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_settings_name_their_key():
    p = profile_from_rates([1.0, 2.0])
    with pytest.raises(UserError) as err:
        plan_day(p, [G], {}, scale_up_s=-1)
    assert err.value.key == "day.scale_up_s"
    with pytest.raises(UserError) as err:
        plan_day(p, [G], {}, min_replicas=-1)
    assert err.value.key == "day.min_replicas"
    with pytest.raises(UserError) as err:
        profile_from_rates([1.0, math.nan])
    assert err.value.key == "day.profile"


def test_same_inputs_same_plan():
    cands = [G, DayCandidate("h-tp2", "h", 2, 13.0, 3.0), DayCandidate("h-tp1", "h", 1, 6.0, 3.0)]
    tiers = {"h": PriceTiers("h", 3.0, 2.2, 1.4, 0.2)}
    rates = [7.0, 9.5, 31.0, 44.0, 28.0, 12.0, 3.0, 0.0]
    a = plan_day(profile_from_rates(rates, 900), cands, tiers, scale_up_s=400).as_dict()
    b = plan_day(profile_from_rates(rates, 900), list(reversed(cands)), tiers, scale_up_s=400).as_dict()
    assert a == b

"""SLO attainment through a day, simulated (optimizer/day_attainment.py)."""

import numpy as np
import pytest

from llmplan.errors import UserError
from llmplan.optimizer import day_attainment as da
from llmplan.optimizer.day_plan import DayCandidate, plan_day, profile_from_rates, read_profile_csv, rebin
from llmplan.optimizer.price_tiers import PriceTiers
from llmplan.optimizer.types import SLOTarget
from llmplan.sim.serving import estimate_capacity_rps
from llmplan.sim.testing_costs import make_replica
from llmplan.sim.workload import LengthSpec, WorkloadSpec

REP = make_replica()
WL = WorkloadSpec(preset=None, input_tokens=LengthSpec("fixed", 200), output_tokens=LengthSpec("fixed", 40))
# a replica's SLO capacity for the day plan: half the analytical throughput bound (one replica
# serves about the whole bound in simulation, so 3 x CAP overloads it)
CAP = 0.5 * estimate_capacity_rps([REP], 200, 40)
SLOS = [SLOTarget("ttft", 90, 2000.0), SLOTarget("tpot", 90, 100.0)]
FAST = da.AttainmentSettings(requests_per_phase=100)
GPU = {"c": "g"}
NO_TIERS = {"g": PriceTiers("g", 1.0)}


def _phases(serving, rates, lead="planned", tiers=NO_TIERS, scale_up_s=600.0, cyclic=True, seed=0):
    prof = profile_from_rates(rates, 3600.0)
    return da.phases(prof, serving, GPU, tiers, scale_up_s, lead, cyclic, np.random.default_rng(seed))


def test_planned_lead_serves_the_plan_from_each_interval_start():
    ph, n = _phases({("c", "on_demand"): (1, 3, 2)}, [1, 1, 1])
    assert n == 0
    assert [[(p.start_s, p.end_s, p.fleet) for p in x] for x in ph] == [
        [(0, 3600, (("c", 1),))], [(3600, 7200, (("c", 3),))], [(7200, 10800, (("c", 2),))]]


def test_reactive_lead_keeps_the_previous_count_until_scale_up_ends():
    ph, _ = _phases({("c", "on_demand"): (1, 3, 2), ("c", "reserved"): (1, 1, 1)}, [1, 1, 1], lead="reactive")
    # interval 1 grows 1 -> 3 on demand: 600 s with 1 + 1 reserved, then 3 + 1
    assert [(p.start_s, p.end_s, p.fleet) for p in ph[1]] == [(3600, 4200, (("c", 2),)), (4200, 7200, (("c", 4),))]
    assert len(ph[2]) == 1 and ph[2][0].fleet == (("c", 3),)  # scale-down is immediate
    # cyclic: interval 0 grows from interval 2's 2? no: 1 < 2, nothing to wait for
    assert len(ph[0]) == 1


def test_reactive_lead_wraps_around_a_cyclic_day_only():
    serving = {("c", "on_demand"): (3, 1)}
    cyc, _ = _phases(serving, [1, 1], lead="reactive", cyclic=True)
    flat, _ = _phases(serving, [1, 1], lead="reactive", cyclic=False)
    assert [p.fleet for p in cyc[0]] == [(("c", 1),), (("c", 3),)]
    assert [p.fleet for p in flat[0]] == [(("c", 3),)]


def test_spot_interruptions_follow_the_rate_and_are_lost_for_the_interval():
    serving = {("c", "spot"): (4,) * 24}
    none, n0 = _phases(serving, [1] * 24, tiers={"g": PriceTiers("g", 1.0, None, 0.5, 0.0)})
    assert n0 == 0 and all(len(x) == 1 for x in none)
    _, counts = zip(*[_phases(serving, [1] * 24, tiers={"g": PriceTiers("g", 1.0, None, 0.5, 0.25)}, seed=s)
                      for s in range(20)])
    assert np.mean(counts) == pytest.approx(0.25 * 4 * 24, rel=0.1)  # 24 expected per day
    ph, n = _phases(serving, [1] * 24, tiers={"g": PriceTiers("g", 1.0, None, 0.5, 0.25)}, scale_up_s=0.0)
    for x in ph:  # the fleet only shrinks within an interval, each step one interruption
        counts = [dict(p.fleet).get("c", 0) for p in x]
        assert counts[0] == 4 and all(b < a for a, b in zip(counts, counts[1:]))
    assert n == sum(4 - dict(x[-1].fleet).get("c", 0) for x in ph)


def test_a_late_spot_replacement_leaves_the_next_interval_short():
    # q close to 1: every replica is interrupted; with a 1-hour scale-up the replacement of one
    # interrupted at time u serves at u + 3600 s, i.e. u into the next interval
    tiers = {"g": PriceTiers("g", 1.0, None, 0.5, 0.999)}
    ph, n = _phases({("c", "spot"): (1, 1)}, [1, 1], tiers=tiers, scale_up_s=3600.0, cyclic=False)
    assert n == 2
    assert ph[0][-1].fleet == () and ph[1][0].fleet == ()
    # interval 1 starts without its replica, and loses the replacement when it is interrupted again
    assert ph[1][0].start_s == 3600


def _day(rates, lead="planned", tiers=None):
    cand = DayCandidate("c", "g", 1, CAP, 1.0)
    day = plan_day(profile_from_rates(rates, 3600.0), [cand], tiers or NO_TIERS, scale_up_s=600.0, max_load=0.8)
    return day, da.day_attainment(day, lambda name: REP, WL, SLOS,
                                  da.AttainmentSettings(requests_per_phase=100, lead=lead))


def test_planned_schedule_meets_the_slos_and_the_static_fleet_too():
    day, att = _day([0.3 * CAP, 1.5 * CAP, 0.3 * CAP])
    for key in ("day", "static"):
        a = att[key]
        assert a["intervals_simulated"] == 3 and a["intervals_met"] == 3
        assert all(v >= 0.9 for v in a["share_within"].values()) and a["share_all_targets"] >= 0.9
    assert att["day"]["intervals"][1]["replicas"] == [max(v[1] for v in day.serving.values())]


def test_reactive_lead_lowers_attainment_when_the_old_fleet_is_overloaded():
    rates = [0.3 * CAP, 3.0 * CAP, 0.3 * CAP]
    _, planned = _day(rates)
    _, reactive = _day(rates, lead="reactive")
    p, r = planned["day"]["intervals"][1], reactive["day"]["intervals"][1]
    assert p["phases"] == 1 and r["phases"] == 2 and r["replicas"][0] == 1
    assert r["share_all_targets"] < p["share_all_targets"]
    assert r["overloaded"] and not r["targets_met"]
    # the static fleet does not scale: the lead changes nothing for it
    assert reactive["static"]["share_all_targets"] == planned["static"]["share_all_targets"]


def test_whole_day_share_is_the_request_weighted_mean_of_intervals():
    _, att = _day([0.2 * CAP, 2.0 * CAP, 0.6 * CAP], lead="reactive")
    rows = att["day"]["intervals"]
    w = [r["rate_rps"] * 3600 for r in rows]
    mean = sum(wi * r["share_all_targets"] for wi, r in zip(w, rows)) / sum(w)
    assert att["day"]["share_all_targets"] == pytest.approx(mean, abs=2e-4)


def test_an_interval_without_replicas_meets_nothing():
    shares, share_all, held, overloaded = da.simulate_phase((), 1.0, lambda n: REP, WL, SLOS, 100, 0, 600.0)
    assert shares == (0.0, 0.0) and share_all == 0.0 and not held and overloaded


def test_long_profiles_are_sampled_and_say_so():
    assert da.sampled_intervals(24, 96) == (list(range(24)), 1)
    idx, stride = da.sampled_intervals(1440, 96)
    assert stride == 15 and idx[:3] == [0, 15, 30] and len(idx) == 96


def test_same_seed_same_attainment():
    tiers = {"g": PriceTiers("g", 1.0, None, 0.6, 0.3)}
    a = _day([0.5 * CAP, CAP], tiers=tiers)[1]
    b = _day([0.5 * CAP, CAP], tiers=tiers)[1]
    assert a == b


@pytest.mark.parametrize("settings,key", [
    (da.AttainmentSettings(lead="eventually"), "day.attainment.lead"),
    (da.AttainmentSettings(requests_per_phase=10), "day.attainment.requests_per_phase"),
    (da.AttainmentSettings(max_intervals=0), "day.attainment.max_intervals"),
])
def test_bad_settings_name_their_key(settings, key):
    with pytest.raises(UserError) as e:
        da.check_settings(settings)
    assert e.value.key == key


def test_rebin_keeps_the_requests(tmp_path):
    per_minute = profile_from_rates([float(i % 60) for i in range(180)], 60.0)
    hourly = rebin(per_minute, 3600.0)
    assert hourly.duration_s == (3600.0,) * 3 and hourly.rate_rps == pytest.approx((29.5,) * 3)
    odd = rebin(per_minute, 7000.0)
    assert odd.duration_s == (7000.0, 3800.0)
    total = sum(r * d for r, d in zip(per_minute.rate_rps, per_minute.duration_s))
    assert sum(r * d for r, d in zip(odd.rate_rps, odd.duration_s)) == pytest.approx(total)
    with pytest.raises(UserError) as e:
        rebin(per_minute, 0)
    assert e.value.key == "day.interval_s"


def test_trace_csv_is_binned(tmp_path):
    f = tmp_path / "trace.csv"
    f.write_text("timestamp_s,prompt\n" + "".join(f"{t},x\n" for t in (1, 2, 3, 1900, 3700)))
    p = read_profile_csv(f, interval_s=1800.0)
    assert p.source == "trace" and p.rate_rps == pytest.approx((3 / 1800, 1 / 1800, 1 / 1800))
    assert read_profile_csv(f).rate_rps == pytest.approx((4 / 3600, 1 / 3600))


def test_plan_reports_the_simulated_attainment_of_both_schedules(tmp_path):
    import io
    import json

    from rich.console import Console

    from llmplan.cli.hydra_app import compose
    from llmplan.cli.plan_cmd import run_plan

    prof = tmp_path / "three_hours.csv"
    # per-minute rates for three hours: 4 req/s, then 12, then 4; re-binned to hours
    prof.write_text("t_start_s,rate_rps\n" + "".join(f"{60 * i},{12 if 60 <= i < 120 else 4}\n" for i in range(180)))
    out = io.StringIO()
    code = run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "search.finalists=0", f"day.profile={prof}",
                                     "day.interval_s=3600", "day.attainment.requests_per_phase=200"]),
                    tmp_path / "p", Console(file=out, width=160))
    assert code == 0
    day = json.loads((tmp_path / "p" / "plan.json").read_text())["day"]
    assert day["intervals"] == 3 and day["profile_source"] == "table, re-binned"
    assert [r["rate_rps"] for r in day["schedule"]] == pytest.approx([4, 12, 4])
    att = day["attainment"]
    assert att["lead"] == "planned" and att["intervals_simulated"] == 3 and any("steady state" in m for m in att["model"])
    for key in ("day", "static"):
        a = att[key]
        assert len(a["intervals"]) == 3 and set(a["share_within"]) == {"TTFT p90 <= 1000 ms", "TPOT p90 <= 50 ms"}
        assert 0 <= a["share_all_targets"] <= min(a["share_within"].values()) <= 1
    # the static fleet holds the peak's replicas in every hour
    assert {r["replicas"][0] for r in att["static"]["intervals"]} == {max(r["replicas"][0] for r in att["day"]["intervals"])}
    assert "simulated SLO attainment, autoscaled" in out.getvalue()
    # switched off: no simulation, the day plan alone
    code = run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "search.finalists=0", f"day.profile={prof}",
                                     "day.interval_s=3600", "day.attainment.enabled=false"]), tmp_path / "q",
                    Console(file=io.StringIO()))
    assert code == 0 and json.loads((tmp_path / "q" / "plan.json").read_text())["day"]["attainment"] is None


def test_plan_refuses_a_bad_attainment_setting_before_planning_the_day(tmp_path):
    from llmplan.cli.hydra_app import compose
    from llmplan.cli.plan_cmd import run_plan

    with pytest.raises(UserError) as e:
        run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "search.finalists=0", "day.profile=diurnal_24h",
                                  "day.attainment.lead=sometime"]), tmp_path)
    assert e.value.key == "day.attainment.lead"


def test_an_overloaded_phase_delays_first_tokens_by_its_growing_backlog():
    n = 50
    vals = {"ttft": np.full(n, 100.0), "tpot": np.full(n, 20.0)}
    sim = da.PhaseSim(vals, np.ones(n, bool), overloaded=True, served_rps=8.0, held=False, backlog_growth_rps=2.0)
    # a request tau s into the phase waits 2 tau / 8 s more: within 2000 ms while tau <= 7.6 s
    shares, share_all, held, over = da.phase_shares(sim, SLOS, 10.0, 76.0)
    within = sum(1 for k in range(da.BACKLOG_POINTS) if 100 + 250 * (k + 0.5) / da.BACKLOG_POINTS * 76 <= 2000)
    assert shares[0] == pytest.approx(within / da.BACKLOG_POINTS) and 0.05 < shares[0] < 0.15
    assert shares[1] == 1.0 and share_all == pytest.approx(shares[0]) and over and not held
    # twice as long a phase: about half the share
    assert da.phase_shares(sim, SLOS, 10.0, 152.0)[0][0] == pytest.approx(shares[0] / 2, abs=0.02)
    steady = da.PhaseSim(vals, np.ones(n, bool), overloaded=False, served_rps=10.0, held=True)
    assert da.phase_shares(steady, SLOS, 10.0, 3600.0) == ((1.0, 1.0), 1.0, True, False)


def test_a_per_minute_day_must_be_re_binned(tmp_path):
    from types import SimpleNamespace

    from llmplan.cli.day_outputs import MAX_INTERVALS, read_profile

    f = tmp_path / "minutes.csv"
    f.write_text("t_start_s,rate_rps\n" + "".join(f"{60 * i},{5 + i % 7}\n" for i in range(1440)))
    app = SimpleNamespace(day=SimpleNamespace(profile=str(f), interval_s=None))
    with pytest.raises(UserError) as e:
        read_profile(app)
    assert e.value.key == "day.interval_s" and "day.interval_s=900" in e.value.fix and MAX_INTERVALS < 1440
    app.day.interval_s = 900.0
    p = read_profile(app)
    assert len(p.rate_rps) == 96 and p.source == "table, re-binned"

"""Two configurations that ran on a common machine are compared there, and the spread between launches is
pooled within a machine only.

The real pair's grid (`tests/fixtures/sglang/0.5.17/smollm2-chat-h100/`) ran on five H100 machines: its
server without speculation measured 5513.5 tok/s on the first (trial 0) and 8097.0 on the fifth (trial 20),
where the confirmation relaunched it beside the best trees. The answer once took the median of the two
machines (6805.3), pooled that 47 % gap into "14.2 % launch to launch", and called a 23-30 % lead on one
machine too close to call.
"""

from __future__ import annotations

from orchestrator.driver.answer.choose import Call, choose_answer
from orchestrator.driver.answer.conclusion import sweep_answer
from orchestrator.driver.answer.groups import Group, Launch, group_launches, on_one_machine, repeat_groups
from orchestrator.driver.answer.noise import NoiseSource, StageTiming
from tests.driver.answer.test_node_note import _records

OVERHEAD = StageTiming(4.0, True, 0.1)  # a tiny target's decode step: the overhead-bound regime


def test_the_real_pair_is_judged_on_the_machine_its_baseline_shares_with_the_trees() -> None:
    answer = sweep_answer(_records())
    assert answer is not None and answer.nospec
    assert answer.launches == (20,) and round(answer.median, 1) == 8097.0  # node 5's launch alone
    verdict = answer.verdict
    assert verdict.call is Call.CLEARLY_AHEAD, verdict.statement
    # the fastest tree on that machine, s6k4d16's relaunch, not its median with node 4's launch
    assert verdict.runner_up == [21] and verdict.runner_up_median is not None
    assert round(verdict.runner_up_median, 1) == 6251.2
    assert "compared on the machine both ran on (trials 0, 12 ran elsewhere" in verdict.statement
    # pooled over the two trees launched twice on node 5 (s2k8d16, s6k1d7): 3.4 %, not 14.2 %
    assert verdict.noise_source is NoiseSource.POOLED and 0.02 < verdict.launch_sd < 0.05
    assert answer.comparison is not None and answer.comparison.baseline.numbers == (20,)


def test_a_configuration_on_two_machines_adds_nothing_to_the_pooled_spread() -> None:
    groups = group_launches(
        [
            Launch(0, "a", 100.0, OVERHEAD, "m1"),
            Launch(1, "a", 150.0, OVERHEAD, "m2"),
            Launch(2, "b", 101.0, OVERHEAD, "m1"),
            Launch(3, "b", 99.0, OVERHEAD, "m1"),
        ]
    )
    assert sorted(repeat_groups(groups)) == [(100.0,), (101.0, 99.0), (150.0,)]


def test_a_pair_is_compared_on_their_common_machine_and_names_what_it_left_out() -> None:
    a = Group("a", (0, 5), (100.0, 150.0), machines=("m1", "m2"))
    b = Group("b", (1, 6), (120.0, 140.0), machines=("m1", "m3"))
    here_a, here_b = on_one_machine(a, b)
    assert (here_a.numbers, here_b.numbers) == ((0,), (1,))
    assert (here_a.elsewhere, here_b.elsewhere) == ((5,), (6,))
    # never on a common machine, or all on one: as they are
    c = Group("c", (2,), (90.0,), machines=("m4",))
    assert on_one_machine(a, c) == (a, c)
    one = Group("d", (3, 4), (95.0, 96.0), machines=("m1", "m1"))
    assert on_one_machine(one, Group("e", (7,), (97.0,), machines=("m1",)))[0] == one


def test_launches_without_a_machine_are_one_machine() -> None:
    """Runs read back from MLflow carry no machine: the answer is the one it always was."""
    launches = [Launch(n, "a" if n % 2 else "b", v, OVERHEAD) for n, v in enumerate([100, 110, 101, 111])]
    base = [Launch(9, "base", 105.0, OVERHEAD)]
    answer = choose_answer(launches, base)
    assert answer is not None and answer.launches == (1, 3) and answer.median == 110.5
    assert "compared on the machine" not in answer.verdict.statement


def test_a_tree_that_beats_the_baseline_on_its_machine_is_not_answered_without_speculation() -> None:
    """The ranked-best tree lost to the baseline on the machine they share, but another tree beat the
    baseline there: speculation pays on that machine, so the answer is that tree, not the baseline."""
    launches = [
        Launch(1, "a", 200.0, OVERHEAD, "m1"),  # a fast machine lifts a's median above b's
        Launch(2, "b", 120.0, OVERHEAD, "m2"),
        Launch(3, "b", 121.0, OVERHEAD, "m2"),
        Launch(4, "a", 95.0, OVERHEAD, "m2"),
    ]
    answer = choose_answer(launches, [Launch(0, "base", 100.0, OVERHEAD, "m2")])
    assert answer is not None and not answer.nospec, answer
    assert answer.config == "b" and answer.launches == (2, 3)
    versus = answer.versus_nospec
    assert versus is not None and versus.runner_up == [0] and versus.gap is not None and versus.gap > 0.15
    # the verdict against the runner-up is the comparison on that machine: a's launch there, 95.0
    assert answer.verdict.runner_up == [4], answer.verdict.statement


def _answer_with_t1_ranked_first(trees: list[Launch]) -> tuple[list[int], float]:
    """The baseline (1000 tok/s on m1) against trees whose first, t1 (700 on m1), the speculation model
    ranks first; the verdict's runner-up and its median."""
    from orchestrator.driver.speculation.predictions import Prediction

    base = [Launch(0, "base", 1000.0, OVERHEAD, "m1")]
    launches = [Launch(1, "t1", 700.0, OVERHEAD, "m1"), *trees]
    answer = choose_answer(launches, base, {"t1": Prediction(2000.0, 1e-4, 1.0)})
    assert answer is not None and answer.nospec
    assert answer.verdict.runner_up_median is not None
    return answer.verdict.runner_up, answer.verdict.runner_up_median


def test_the_baseline_is_not_judged_against_a_tree_that_never_ran_beside_it() -> None:
    """The fastest tree measured is the one to beat only where it ran beside the baseline: a tree on the
    faster host alone (800 on m2) is not compared across machines."""
    assert _answer_with_t1_ranked_first([Launch(2, "t2", 800.0, OVERHEAD, "m2")]) == ([1], 700.0)


def test_the_fastest_tree_is_the_fastest_on_the_baseline_s_machine() -> None:
    """t2 measured 980 on m2 and 650 beside the baseline on m1: its median over both (815) is above t1's
    700, but on m1, where the comparison is made, t1 is the faster."""
    trees = [Launch(2, "t2", 650.0, OVERHEAD, "m1"), Launch(3, "t2", 980.0, OVERHEAD, "m2")]
    assert _answer_with_t1_ranked_first(trees) == ([1], 700.0)


def test_a_tree_faster_beside_the_baseline_than_the_ranked_first_is_the_one_to_beat() -> None:
    trees = [Launch(2, "t2", 750.0, OVERHEAD, "m1"), Launch(3, "t2", 980.0, OVERHEAD, "m2")]
    runner, median = _answer_with_t1_ranked_first(trees)
    assert runner == [2] and median == 750.0

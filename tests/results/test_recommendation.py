"""results/recommendation.py: a question's decision folder name, one per question however long."""

from __future__ import annotations

from results.recommendation import question_name


def test_a_question_names_its_folder_and_long_ones_never_collide() -> None:
    assert question_name(slo="tpot_p90=150,ttft_p90=2000", hardware=None) == "slo-tpot_p90=150,ttft_p90=2000"
    assert question_name() == "default"
    grid = ",".join(str(50 * k) for k in range(1, 60))
    a, b = question_name(slo="ttft_p90=2000", map_tpot=grid + ",20000"), question_name(slo="ttft_p90=2000", map_tpot=grid + ",30000")
    assert len(a) == len(b) == 150 and a[:141] == b[:141] and a != b  # cut alike, told apart by the digest
    assert question_name(slo="ttft_p90=2000", map_tpot=grid + ",20000") == a  # the same question, the same folder

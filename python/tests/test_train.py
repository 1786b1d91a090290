"""coppice.train: jobs from a dict or a file, a per-step callback, errors."""
import os
import traceback

import pytest

import coppice
from conftest import REPO, tiny_job


def test_dict_job_trains_and_summarizes():
    s = coppice.train(tiny_job(method="rigl", end_step=200, interval=20, drop_fraction=0.3))
    assert s["final_step"] == 300 and len(s["losses"]) == 300
    assert s["test_accuracy"] > 0.9
    assert s["mask_updates"] == 10
    assert abs(s["density"]["fc1.weight"] - 0.1) < 0.01


def test_callback_sees_every_step_and_stops_early():
    seen = []
    s = coppice.train(tiny_job(), callback=lambda step, loss: seen.append((step, loss)) or step < 25)
    assert [step for step, _ in seen] == list(range(1, 26))
    assert s["final_step"] == 25
    assert [loss for _, loss in seen] == s["losses"]


def test_an_exception_in_the_callback_stops_the_run_with_its_traceback():
    def watch(step, loss):
        if step == 5:
            raise KeyError("stop here")
        return True

    with pytest.raises(KeyError, match="stop here") as info:
        coppice.train(tiny_job(), callback=watch)
    assert "watch" in "".join(traceback.format_tb(info.value.__traceback__))


def test_a_bad_job_names_the_key():
    job = tiny_job()
    job["optimizer"]["lrr"] = 0.1
    with pytest.raises(ValueError, match="optimizer.lrr: unknown key; did you mean 'optimizer.lr'"):
        coppice.train(job)


def test_a_job_file_with_overrides_and_max_steps(tmp_path):
    s = coppice.train(os.path.join(REPO, "configs", "lenet300_rigl_90.yaml"),
                      overrides=[f"checkpoint.dir={tmp_path}/ckpt", f"logging.metrics={tmp_path}/metrics.jsonl"],
                      max_steps=20)
    assert s["final_step"] == 20
    assert any(name.startswith("ckpt-0000000020") for name in os.listdir(tmp_path / "ckpt"))

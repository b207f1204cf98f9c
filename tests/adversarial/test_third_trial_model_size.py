"""The third hostile trial (issue 40), a model too large for memory: a manifest with
``"num_classes": 16777216`` (under the 2^24 cap) was killed silently in a 3 GiB group, its
classifier alone about 16 GiB at hidden 256. The model's size (parameters, gradients and Adam's
two moments) is now checked before it is built, on torch's meta device, and refused in one line
naming ``--hidden`` and the dataset's classes.
"""

from __future__ import annotations

import json

import pytest
import torch

import fgnn.models.size as size
from fgnn.data.memory import MemoryLimit
from fgnn.data.synthetic import rmat_dataset
from fgnn.models import GraphSAGE
from fgnn.models.size import ModelTooLarge, check_model_fits

GIB = 1 << 30
GROUP = MemoryLimit(3 * GIB, "a test's 3 GiB cgroup", 3 * GIB)


def test_the_check_counts_the_classifier_without_building_it():
    build = lambda: GraphSAGE(128, 16777216, num_layers=2, hidden=256)  # noqa: E731
    with pytest.raises(ModelTooLarge) as e:
        check_model_fits(build, limit=GROUP)
    msg = str(e.value)
    assert "\n" not in msg and "a test's 3 GiB cgroup" in msg
    assert e.value.largest[1] in ((16777216, 256), (256, 16777216)), e.value.largest
    assert e.value.need >= 4 * 4 * 256 * 16777216                  # 64 GiB with Adam's state
    check_model_fits(lambda: GraphSAGE(128, 16, num_layers=2, hidden=256), limit=GROUP)


def test_a_model_that_cannot_build_on_meta_is_not_checked():
    def build():
        raise RuntimeError("computes with its weights")
    check_model_fits(build, limit=MemoryLimit(1, "nothing"))


@pytest.fixture
def huge_classes(tmp_path, monkeypatch):
    from fgnn.data.ondisk import save_dataset

    save_dataset(rmat_dataset(scale=6, edge_factor=4, feat_dim=8, num_classes=3,
                              train_frac=0.5, seed=0), tmp_path / "d")
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    manifest["num_classes"] = 16777216
    (tmp_path / "d" / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(size, "host_memory_limit", lambda: GROUP)

    original = torch.nn.Linear.reset_parameters

    def on_meta_only(self):
        if self.weight.device.type != "meta":
            raise AssertionError("the model was built")
        original(self)
    monkeypatch.setattr(torch.nn.Linear, "reset_parameters", on_meta_only)
    return tmp_path / "d"


def test_a_manifest_with_16m_classes_is_refused_before_the_model_is_built(huge_classes,
                                                                         cli_error):
    line = cli_error(["--dataset", f"ondisk:{huge_classes}", "--devices", "1", "--epochs", "1",
                      "--hidden", "256", "--fanouts", "4,4", "--batch-size", "16"])
    assert line.startswith("launch.py: error: argument --hidden"), line
    assert "the model needs about" in line and "classes 16,777,216" in line, line
    assert "lower --hidden (256)" in line, line


def test_the_api_names_the_field(huge_classes):
    from fgnn.config import JobConfig, ModelConfig, RuntimeConfig, SamplerConfig, TrainConfig
    from fgnn.job import Job, JobConfigError

    cfg = JobConfig(dataset=f"ondisk:{huge_classes}", model=ModelConfig(hidden=256),
                    sampler=SamplerConfig(fanouts=(4, 4)), runtime=RuntimeConfig(devices=1),
                    train=TrainConfig(epochs=1, batch_size=16))
    with pytest.raises(JobConfigError) as e:
        Job(cfg, progress=False).run()
    assert e.value.field == "model.hidden" and isinstance(e.value, ValueError)

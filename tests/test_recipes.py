"""Recipes (issue 20): GCN on a Planetoid dataset gets Kipf & Welling's settings with no extra
flags, every other dataset and model keeps the FGNN §7.1 defaults, and a typed flag always wins."""

from __future__ import annotations

import dataclasses

import pytest

from fgnn.cli import build_parser, config_from_args
from fgnn.config import JobConfig, SamplerConfig
from fgnn.recipes import (FGNN_RECIPE, FULL_FANOUT, GAE_RECIPE, KIPF_RECIPE, apply_recipe,
                          recipe_for, with_spec_options)


def _config(*argv: str) -> JobConfig:
    return config_from_args(build_parser().parse_args(list(argv)))


@pytest.mark.parametrize("dataset", ["cora", "citeseer", "pubmed", "CiteSeer",
                                     "cora:normalize_features=true"])
def test_gcn_on_planetoid_gets_kipf_welling_with_no_other_flag(dataset):
    cfg = _config("--dataset", dataset)
    assert cfg.recipe == "kipf-welling"
    assert (cfg.model.name, cfg.model.hidden, cfg.model.dropout, cfg.model.input_dropout) == \
        ("gcn", 64, 0.5, 0.5)
    assert (cfg.train.lr, cfg.train.weight_decay, cfg.train.epochs) == (0.01, 5e-4, 200)
    assert cfg.sampler.fanouts == (FULL_FANOUT, FULL_FANOUT)        # 2 layers, every neighbour
    assert cfg.train.batch_size >= 140                              # one batch of the split


def test_the_full_fanout_keeps_every_neighbour_of_every_planetoid_vertex():
    assert FULL_FANOUT > 171                                        # PubMed's largest degree


@pytest.mark.parametrize("argv", [[], ["--dataset", "cora", "--model", "sage"],
                                  ["--dataset", "cora", "--model", "pinsage"],
                                  ["--dataset", "rmat:scale=8", "--model", "gcn"]])
def test_other_datasets_and_models_keep_the_fgnn_defaults(argv):
    cfg = _config(*argv)
    ref = config_from_args(build_parser().parse_args(argv))
    assert cfg.recipe == "fgnn-7.1"
    assert (cfg.model.hidden, cfg.model.input_dropout, cfg.train.lr, cfg.train.epochs) == \
        (256, 0.0, 0.003, 10)
    assert cfg == ref


def test_a_typed_flag_wins_over_the_recipe_and_the_rest_still_applies():
    cfg = _config("--dataset", "cora", "--hidden", "16", "--epochs", "3", "--fanouts", "10,5",
                  "--weight-decay", "0")
    assert cfg.recipe == "kipf-welling"
    assert (cfg.model.hidden, cfg.train.epochs, cfg.sampler.fanouts) == (16, 3, (10, 5))
    assert cfg.train.weight_decay == 0.0
    assert (cfg.train.lr, cfg.model.input_dropout) == (0.01, 0.5)     # untouched fields: recipe


def test_a_flag_typed_at_its_fgnn_default_still_wins():
    """``--hidden 256`` equals the parser's default; it is typed, so the recipe's 64 loses."""
    cfg = _config("--dataset", "cora", "--hidden", "256", "--input-dropout", "0")
    assert (cfg.model.hidden, cfg.model.input_dropout) == (256, 0.0)


@pytest.mark.parametrize("dataset", ["cora", "citeseer", "PubMed"])
def test_gae_recipe_reads_the_raw_planetoid_features(dataset):
    """GAE's encoder reads the raw bag of words (tkipf/gae); node classification keeps the
    row-normalised rows of Kipf & Welling's GCN."""
    assert _config("--dataset", dataset, "--task", "link").dataset == \
        f"{dataset}:normalize_features=false"
    assert _config("--dataset", dataset).dataset == dataset


def test_a_spec_option_typed_in_the_dataset_wins_over_the_gae_recipe():
    for spec in ("cora:normalize_features=true", "citeseer:normalize_features=false"):
        cfg = _config("--dataset", spec, "--task", "link")
        assert (cfg.recipe, cfg.dataset) == ("gae", spec)


def test_with_spec_options_appends_only_missing_keys():
    opts = GAE_RECIPE.spec_options
    assert with_spec_options("cora", opts) == "cora:normalize_features=false"
    assert with_spec_options(" cora: ", opts) == "cora:normalize_features=false"
    assert with_spec_options("cora:normalize_features=true", opts) == \
        "cora:normalize_features=true"
    assert with_spec_options("rmat:scale=8", {"seed": 3}) == "rmat:scale=8,seed=3"
    assert with_spec_options("rmat:scale=8", {}) == "rmat:scale=8"
    with pytest.raises(ValueError, match="unknown key 'bogus'"):
        with_spec_options("cora:bogus=1", opts)


def test_recipe_for_and_apply_recipe_in_python():
    assert recipe_for("pubmed", "gcn") is KIPF_RECIPE
    assert recipe_for("pubmed", "sage") is FGNN_RECIPE
    assert recipe_for("ogb:/data/cora", "gcn") is FGNN_RECIPE
    cfg = apply_recipe(JobConfig(dataset="cora"), KIPF_RECIPE, given={"model.hidden"})
    assert (cfg.recipe, cfg.model.hidden, cfg.train.epochs) == ("kipf-welling", 256, 200)
    assert cfg.sampler == SamplerConfig(fanouts=(FULL_FANOUT, FULL_FANOUT))
    with pytest.raises(ValueError, match="JobConfig.recipe"):
        JobConfig(recipe="pyg")


def test_help_names_the_recipes_and_the_kipf_values():
    text = " ".join(build_parser().format_help().split())
    assert "kipf-welling" in text and "fgnn-7.1" in text and "gae" in text
    assert f"kipf-welling: {FULL_FANOUT},{FULL_FANOUT}" in text                # --fanouts
    assert "(default: 256; kipf-welling: 64; gae: 32)" in text                 # --hidden
    assert "(default: 16; gae: 16)" in text                                    # --embed-dim


def test_the_report_records_and_prints_the_recipe():
    from dataclasses import replace

    from fgnn.report import format_report
    from test_report import make_result

    result = make_result()
    result = replace(result, config=JobConfig(recipe="kipf-welling").to_dict())
    report = result.to_dict()
    assert report["config"]["recipe"] == "kipf-welling"
    assert "recipe kipf-welling" in format_report(report)


@pytest.mark.slow
def test_kipf_welling_recipe_reaches_the_published_cora_accuracy(planetoid_root):
    """The recipe's own values (model, sampler, optimiser, epochs, batch) in the single-process
    loop, one seed (the fanouts cover every neighbourhood, so only dropout is random): the
    published 81.5 within a point. launch.py's five seeds through the factored runtime are in
    docs/benchmarks.md."""
    import torch

    from fgnn.data import load_planetoid
    from fgnn.models import build_model
    from fgnn.sampling import KHop
    from fgnn.training import fit

    cfg = _config("--dataset", "cora")
    cora = load_planetoid("cora", planetoid_root)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    accs = []
    try:
        for seed in (0,):
            torch.manual_seed(seed)
            net = build_model(cfg.model, cora.feat_dim, cora.num_classes,
                              len(cfg.sampler.fanouts))
            train = dataclasses.replace(cfg.train, seed=seed)
            accs.append(fit(cora, net, KHop(cfg.sampler.fanouts), train).test_acc)
    finally:
        torch.set_num_threads(threads)
    print(f"\ncora kipf-welling recipe, one process: {accs}")
    assert accs[0] >= 0.805, accs

"""kernelkit's paper experiments: ``kernelkit reproduce NAME`` / ``reproduce all``.

A separate distribution (``kernelkit-experiments``), so that the ``kernelkit`` wheel holds
the library alone. It registers itself under the ``kernelkit.experiments`` entry point
group; the ``kernelkit`` command line finds it there and reads these names from this
module, which imports no experiment until one is run:

* :data:`EXPERIMENTS` – name -> :class:`kernelkit.experiments.Entry` (module path and a
  one-line description), in the order ``kernelkit reproduce all`` runs them;
* :data:`BENCHMARKS` – the same for ``kernelkit bench NAME`` (the benchmark modules live
  in :mod:`kernelkit_experiments.bench`);
* :func:`write_summary` and :func:`collect_rows` – ``REPORT.md`` over every experiment;
* :func:`claim_counts` – the verdict counts of one experiment's report (the line
  ``kernelkit reproduce`` prints when it finishes).

Experiment modules expose::

    NAME: str
    DESCRIPTION: str
    def run(out_dir: pathlib.Path, quick: bool = False, seed: int = 0) -> dict

and write ``report.md``, PNG plots and ``results.json`` into ``out_dir`` through
:class:`kernelkit_experiments._report.Report`.
"""

from __future__ import annotations

from kernelkit.experiments import Entry

from ._summary import claim_counts, collect_rows, write_summary
from .bench import BENCHMARKS

__all__ = ["BENCHMARKS", "EXPERIMENTS", "claim_counts", "collect_rows", "write_summary"]


def _exp(name, module, description):
    return Entry(name, f"{__name__}.{module}", description, "experiment")


#: Experiments in the order ``kernelkit reproduce all`` runs them.
EXPERIMENTS: dict[str, Entry] = {
    e.name: e
    for e in (
        _exp(
            "favor-variance",
            "favor_variance",
            "FAVOR# Sec. 5.1: relative variance of softmax-kernel random features "
            "(Trig ... SDERF) vs sigma",
        ),
        _exp(
            "favor-classification",
            "favor_classification",
            "FAVOR# Sec. 5.2: Nadaraya-Watson kernel classification with random features",
        ),
        _exp(
            "dp-gp",
            "dp_gp",
            "Dot-product features Table 3: GP regression / classification with a Gaussian "
            "sketch or RFF vs Optimized Maclaurin",
        ),
        _exp(
            "dp-variance",
            "dp_variance",
            "Dot-product RF Figs. 2-3: MSE of real vs complex sketches vs degree; complex / "
            "real TensorSRHT variance ratio on image data",
        ),
        _exp(
            "dp-frobenius",
            "dp_frobenius",
            "Dot-product RF Fig. 6: relative Frobenius error of every sketch, Random and "
            "Optimized Maclaurin on Fashion-MNIST (p = 3, 7, 10; D = d, 3d, 5d)",
        ),
        _exp(
            "hrf-pointwise",
            "hrf_pointwise",
            "Hybrid RF Figs. 2/5: pointwise relative error of the softmax kernel on the "
            "sphere (d = 64) vs angle, Trig / FAVOR+ vs FLOP-matched hybrids",
        ),
        _exp(
            "hrf-uci",
            "hrf_uci",
            "Hybrid RF Table 1: softmax-kernel MSE on wine and Boston (HRF-ort, HRF-iid, "
            "ORF-reg, ORF-Had, Halton-R)",
        ),
        _exp(
            "hrf-clustered",
            "hrf_clustered",
            "Hybrid RF Table 3: clustered hybrid features on synthetic clustered data",
        ),
        _exp(
            "attention-approx",
            "attention_approx",
            "Linear attention: error of every feature map against exact softmax attention "
            "vs number of features",
        ),
        _exp(
            "tiny-lm",
            "tiny_lm",
            "Linear attention: character-level Transformer LM with exact, FAVOR+, FAVOR++, "
            "FAVOR# and hybrid attention",
        ),
        _exp(
            "mlm-encoder",
            "mlm_encoder",
            "FAVOR# Sec. 5.3 (bidirectional): masked character encoder with exact, FAVOR+, "
            "FAVOR++ and FAVOR# (SADERF, SDERF) attention",
        ),
        _exp(
            "jdl-gaussian",
            "jdl_gaussian",
            "JDL Sec. 5.1: conditional second moments of Gaussian data, JDL vs JPDL vs CME",
        ),
        _exp(
            "jdl-small",
            "jdl_small",
            "JDL Sec. 5.1: uniform and Cauchy data sets with n in {50, 100, 200}",
        ),
        _exp(
            "jdl-classification",
            "jdl_classification",
            "JDL Sec. 5.2: classification as a conditional distribution, JDL vs CME vs KLR",
        ),
        _exp(
            "sgb-logreg",
            "sgb_logreg",
            "SGB: multinomial logistic regression, SPFB / LSPFB vs SGD, Adam, L-BFGS",
        ),
    )
}

"""HCLG built by symnet against Kaldi's (tests/data/kaldi-decode/: the same lexicon, digit loop and monophone
model through Kaldi's graph tools): decoded with the shipped log-likelihoods, the same words and alignment per
utterance as Kaldi's decoder on Kaldi's graph, and the same cost where the best path ends in a final state.
Costs agree to about 1e-3, not exactly: Kaldi's determinization and encoded minimization treat weights within
1/1024 of each other as equal, so its graph's weights are off by up to that here and there. (A one-frame
utterance ends in no final state; its partial cost depends on where pushing put the weights, so only its
words are compared.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from symnet._src.kaldi.models.transition_model import read_transition_model
from symnet._src.kaldi_io.binary import make_reader
from symnet._src.kaldi_io.tables import read_table
from symnet.decode import DecodingGraph, GraphBuildError, decode, make_hclg, make_lang, parse_lexicon, word_loop

DATA = Path(__file__).resolve().parent.parent / "data" / "kaldi-decode"
LEXICON = re.search(r'LEXICON = """(.*?)"""', (DATA / "make.py").read_text(), re.S).group(1)  # type: ignore[union-attr]


def table(name: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in (DATA / name).read_text().splitlines()}


def digit_graph() -> tuple[DecodingGraph, dict[str, int]]:
    lang = make_lang(parse_lexicon(LEXICON), silence_phones=["sil"], optional_silence="sil", silence_prob=0.5)
    words = {w: int(i) for w, i in (line.split() for line in (DATA / "words.txt").read_text().splitlines())}
    assert dict(lang.words) == words  # numbered as prepare_lang.sh numbers them
    digits = [w for w in words if w not in ("<eps>", "#0", "<s>", "</s>", "!SIL")]
    tm = read_transition_model(make_reader((DATA / "trans.mdl").read_bytes(), "trans.mdl"))
    hclg = make_hclg(lang, word_loop(lang.words, digits), tm, self_loop_scale=0.1)
    # Kaldi's HCLG.fst: 101 states, 222 arcs
    assert (hclg.num_states, hclg.num_arcs) == (102, 234)
    return DecodingGraph.of(hclg, tm.transition_pdfs()), words


@pytest.mark.parametrize("scale", ["0.1", "1.0"])
def test_symnets_hclg_decodes_as_kaldis(scale: str) -> None:
    graph, _ = digit_graph()
    loglikes = read_table(f"ark:{DATA / 'loglikes.ark'}")
    words, alignments, likes = table(f"words-{scale}.txt"), table(f"ali-{scale}.txt"), table(f"loglike-{scale}.txt")
    for key, scores in loglikes.items():
        best = decode(graph, scores, acoustic_scale=float(scale), beam=40.0)
        assert list(best.words) == [int(w) for w in words[key]], key
        if best.final:
            assert list(best.alignment) == [int(t) for t in alignments[key]], key
            assert best.log_like_per_frame() == pytest.approx(float(likes[key][0]), abs=1e-4), key
    assert sum(decode(graph, s, acoustic_scale=1.0, beam=40.0).final for s in loglikes.values()) == 4


def test_bad_input_is_named() -> None:
    words = {"<eps>": 0, "a": 1, "b": 2, "c": 3, "#0": 4}
    lang = make_lang(parse_lexicon("a x y\nb x\n"), words=words)
    tm = read_transition_model(make_reader((DATA / "trans.mdl").read_bytes(), "trans.mdl"))
    with pytest.raises(GraphBuildError, match="word 'c' \\(3\\), which the lexicon does not pronounce"):
        make_hclg(lang, word_loop(words, ["a", "c"]), tm)
    with pytest.raises(GraphBuildError, match="phone 'x' is not in the phone symbol table"):
        make_lang(parse_lexicon("a x\n"), phones={"<eps>": 0, "y": 1, "#0": 2})
    with pytest.raises(GraphBuildError, match="lex:2: the pronunciation probability"):
        parse_lexicon("a 1.0 x\nb 2 y\n", "lex", probabilities=True)


def test_a_chain_models_graph_says_each_phones_first_frame_with_pdf_class_0() -> None:
    """HCLG of Kaldi's chain topology (`chain_model`): every path of up to 5 frames writes words whose phones
    it says as pdf-class 0 (the phone's first frame) then pdf-class 1 for each further frame, with pdfs numbered
    as `Topology.chain(...).monophone_pdfs()`, each frame costing -log 0.5 (self-loop or exit; mkgraph.sh's
    self-loop scale 1.0 for chain models) on top of the grammar's cost, the same for every path of one word
    sequence and length."""
    import itertools
    import math

    from symnet._src.decode.graphs.wfst import Wfst
    from symnet.chain import Topology
    from symnet.decode import chain_model

    from .fst_brute import relation

    phones = {"<eps>": 0, "x": 1, "y": 2, "#0": 3, "#1": 4}
    lang = make_lang(parse_lexicon("a x y\nb x\n"), phones=phones)
    tm = chain_model([1, 2])
    hclg = make_hclg(lang, word_loop(lang.words, ["a", "b"]), tm, self_loop_scale=1.0)
    pdfs = tm.transition_pdfs()
    assert Topology.chain([1, 2]).monophone_pdfs() == {1: (0, 1), 2: (2, 3)}
    pronounced = {lang.words["a"]: (1, 2), lang.words["b"]: (1,)}
    seen: dict[tuple, float] = {}
    for (tids, words), weight in relation(Wfst.of(hclg), 5, 5, "log").items():
        said = tuple(int(pdfs[t]) for t in tids)
        sayings = [
            sum(((2 * (p - 1),) + (2 * (p - 1) + 1,) * (n - 1) for p, n in zip(phones_of, lengths)), ())
            for phones_of in [sum((pronounced[w] for w in words), ())]
            for lengths in itertools.product(range(1, 6), repeat=len(phones_of))
        ]
        assert said in sayings, (said, words)
        cost = weight - len(tids) * math.log(2.0)
        assert seen.setdefault(words, cost) == pytest.approx(cost, abs=1e-4), words
    assert {(lang.words["a"],), (lang.words["b"],), (lang.words["b"], lang.words["a"])} <= set(seen)

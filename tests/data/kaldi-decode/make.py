"""A digit-loop decoding graph built by Kaldi's own tools, and Kaldi's decoder's best paths on it, for
tests/decode/test_decoder.py.

    python tests/data/kaldi-decode/make.py --kaldi-bin DIR --kaldi-utils KALDI/egs/wsj/s5/utils

Makes a lexicon of the eleven digit words (CMUdict-style phones, a silence word), Kaldi's lang directory
(`prepare_lang.sh` without position-dependent phones: its 3-state topology), a one-state grammar that loops
over the digits, a monophone model (`gmm-init-mono`), and HCLG as `utils/mkgraph.sh` composes it (context width
1: LG determinised, minimised and pushed, C, H with `make-h-transducer`, then determinised, disambiguation
symbols removed, minimised, self-loops added at scale 0.1). Then `latgen-faster-mapped` decodes random
log-likelihoods (`loglikes.ark`) with a wide beam, at two acoustic scales. Kept: `HCLG.fst`, `words.txt`,
`trans.mdl` (the transition model, text), `loglikes.ark`, and per scale Kaldi's words (`words-SCALE.txt`),
alignments (`ali-SCALE.txt`) and log-likelihood per frame (`loglike-SCALE.txt`). The tests read these only.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import kaldiio
import numpy as np

HERE = Path(__file__).resolve().parent
LEXICON = """!SIL sil
one w ah n
two t uw
three th r iy
four f ao r
five f ay v
six s ih k s
seven s eh v ah n
eight ey t
nine n ay n
oh ow
zero z ih r ow
"""
SCALES = ("0.1", "1.0")


def sh(command: str, cwd: Path, env: dict[str, str]) -> str:
    return subprocess.run(command, shell=True, cwd=cwd, env=env, check=True, capture_output=True, text=True).stderr


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kaldi-bin", required=True)
    p.add_argument("--kaldi-utils", required=True, help="Kaldi's egs/wsj/s5/utils")
    args = p.parse_args()
    env = {**os.environ, "PATH": f"{Path(args.kaldi_bin).resolve()}:{os.environ['PATH']}"}
    work = Path(tempfile.mkdtemp())
    (work / "utils").symlink_to(Path(args.kaldi_utils).resolve())
    (work / "dict").mkdir()
    (work / "dict/lexicon.txt").write_text(LEXICON)
    (work / "dict/silence_phones.txt").write_text("sil\n")
    (work / "dict/optional_silence.txt").write_text("sil\n")
    phones = sorted({p for line in LEXICON.splitlines()[1:] for p in line.split()[1:]})
    (work / "dict/nonsilence_phones.txt").write_text("".join(p + "\n" for p in phones))
    (work / "dict/extra_questions.txt").write_text("")
    # prepare_lang.sh's final validation misreads this OpenFst's fstinfo ("not olabel sorted"); the lang is made
    subprocess.run(
        "utils/prepare_lang.sh --position-dependent-phones false dict '!SIL' lang_tmp lang",
        shell=True, cwd=work, env=env, capture_output=True,
    )  # fmt: skip
    words = [line.split()[0] for line in (work / "lang/words.txt").read_text().splitlines()]
    digits = [w for w in words if w not in ("<eps>", "#0", "<s>", "</s>", "!SIL")]
    grammar = "".join(f"0 0 {w} {w} {np.log(len(digits)):.6f}\n" for w in digits) + "0 0\n"
    (work / "g.txt").write_text(grammar)
    steps = [
        "fstcompile --isymbols=lang/words.txt --osymbols=lang/words.txt g.txt | fstarcsort --sort_type=ilabel > G.fst",
        "gmm-init-mono lang/topo 13 final.mdl tree",
        "fsttablecompose lang/L_disambig.fst G.fst | fstdeterminizestar --use-log=true | fstminimizeencoded "
        "| fstpushspecial > LG.fst",
        "fstcomposecontext --context-size=1 --central-position=0 --read-disambig-syms=lang/phones/disambig.int "
        "--write-disambig-syms=disambig_ilabels.int ilabels < LG.fst | fstarcsort --sort_type=ilabel > CLG.fst",
        "make-h-transducer --disambig-syms-out=disambig_tid.int --transition-scale=1.0 ilabels tree final.mdl > Ha.fst",
        "fsttablecompose Ha.fst CLG.fst | fstdeterminizestar --use-log=true | fstrmsymbols disambig_tid.int "
        "| fstrmepslocal | fstminimizeencoded > HCLGa.fst",
        "add-self-loops --self-loop-scale=0.1 --reorder=true final.mdl < HCLGa.fst > HCLG.fst",
        "copy-transition-model --binary=false final.mdl trans.mdl",
    ]
    for step in steps:
        sh(step, work, env)
    info = subprocess.run("am-info final.mdl", shell=True, cwd=work, env=env, capture_output=True, text=True).stdout
    num_pdfs = int(re.search(r"number of pdfs (\d+)", info).group(1))
    rng = np.random.default_rng(0)
    loglikes = {}
    for i, frames in enumerate((1, 9, 23, 40, 61)):
        scores = 3.0 * rng.standard_normal((frames, num_pdfs))
        loglikes[f"utt{i}"] = (scores - np.log(np.exp(scores).sum(1, keepdims=True))).astype(np.float32)
    kaldiio.save_ark(str(HERE / "loglikes.ark"), loglikes)
    for name in ("HCLG.fst", "trans.mdl"):
        shutil.copy(work / name, HERE / name)
    shutil.copy(work / "lang/words.txt", HERE / "words.txt")
    for scale in SCALES:
        log = sh(
            f"latgen-faster-mapped --acoustic-scale={scale} --beam=40 --lattice-beam=1 --max-active=1000000 "
            f"--allow-partial=true trans.mdl HCLG.fst ark:{HERE / 'loglikes.ark'} ark:/dev/null "
            f"ark,t:{HERE / f'words-{scale}.txt'} ark,t:{HERE / f'ali-{scale}.txt'}",
            HERE, env,
        )  # fmt: skip
        found = re.findall(r"Log-like per frame for utterance (\S+) is (\S+) over (\d+) frames", log)
        (HERE / f"loglike-{scale}.txt").write_text("".join(f"{u} {v} {n}\n" for u, v, n in found))


if __name__ == "__main__":
    main()

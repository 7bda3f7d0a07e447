"""Makes samples.tar.xz, the corpus samples the tests load without a synthesiser: a digits corpus (1 or 2 digits)
and a commands corpus, each with training voices of flite and espeak-ng and held-out ones, made by
`symnet.datasets.synthesise_corpus` as it makes any corpus (less the per-utterance records in utts/).

    apt-get install flite espeak-ng
    python tests/data/corpus-samples/make.py
"""

import shutil
import tarfile
import tempfile
from pathlib import Path

from symnet.datasets import CorpusSet, synthesise_corpus

HERE = Path(__file__).resolve().parent
TRAIN = ("flite:kal16", "flite:slt", "espeak:en-us+f2", "espeak:en-gb+m1")
TEST = ("flite:rms", "espeak:en-gb-scotland+m3")
#: quick speech and little noise, so that the 15 utterances compress to under 300 KB
SMALL = dict(stretch=(0.7, 0.75), snr_db=(40.0, 45.0), seed=1)


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    return info


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        built = {
            "digits": synthesise_corpus(folder, "digits", sets=[CorpusSet("train", TRAIN, 6), CorpusSet(
                "unseen", TEST, 3, held_out=True)], digits=(1, 2), **SMALL),
            "commands": synthesise_corpus(folder, "commands", sets=[CorpusSet("train", TRAIN, 4), CorpusSet(
                "unseen", TEST, 2, held_out=True)], **SMALL),
        }  # fmt: skip
        with tarfile.open(HERE / "samples.tar.xz", "w:xz", preset=9) as tar:
            for name, corpus in built.items():
                shutil.rmtree(corpus.folder / "utts")
                tar.add(corpus.folder, arcname=name, filter=_plain)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Real data in, end to end: `pacictl prepare-data` makes token shards with a
SentencePiece BPE vocabulary trained on the corpus, `pacictl train` trains from
them (examples/kjv-bpe-shards.yaml, shrunk), `pacictl sample` reads the
checkpoint back through the same tokenizer; and what must be refused is, with
the file named and nothing written. Run by ctest with PACI_BUILD_DIR and
PACI_SOURCE_DIR.
"""
import os
import shutil
import subprocess
import tempfile
import unittest

import yaml

from harness.paths import CORPUS, PACICTL, SOURCE
from harness.pipeline import Run

EXAMPLE = os.path.join(SOURCE, "examples", "kjv-bpe-shards.yaml")
VOCAB = 400


def pacictl(*args, stderr=subprocess.STDOUT):
    """Runs pacictl; (exit code, its output: stdout and, unless told, stderr)."""
    proc = subprocess.run([PACICTL] + list(args), stdout=subprocess.PIPE, stderr=stderr,
                          text=True, errors="replace", timeout=600)
    return proc.returncode, proc.stdout


def example_spec(dataset, checkpoint, steps=40, **data):
    """examples/kjv-bpe-shards.yaml made small: a tiny model, a few steps, these folders."""
    with open(EXAMPLE) as f:
        spec = yaml.safe_load(f)
    spec["model"].update(vocab_size=VOCAB, num_layers=2, d_model=32, seq_len=32)
    spec["pipeline"]["micro_batch_size"] = 4
    spec["training"].update(steps=steps, eval_interval=steps // 2, eval_micro_batches=2)
    spec["data"]["dataset"] = dataset
    spec["data"].update(data)
    spec["checkpoint"] = {"directory": checkpoint, "interval": steps}
    return yaml.safe_dump(spec)


class DataTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        cls.dataset = os.path.join(cls.dir, "genesis-bpe")
        # Small shards, so that the last one can be held out for validation.
        cls.prepared = pacictl("prepare-data", CORPUS, "--out=" + cls.dataset, "--tokenizer=bpe",
                               "--vocab_size=%d" % VOCAB, "--shard_tokens=20000")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def setUp(self):
        self.assertEqual(self.prepared[0], 0, self.prepared[1])

    def test_prepare_data_writes_shards_and_the_tokenizer_and_says_so(self):
        names = sorted(os.listdir(self.dataset))
        self.assertIn("tokenizer", names)
        shards = [n for n in names if n.endswith(".bin")]
        self.assertGreaterEqual(len(shards), 2, names)
        last = self.prepared[1].strip().splitlines()[-1]
        self.assertRegex(last, r"^wrote .*genesis-bpe: %d shards, [\d,]+ tokens, .* tokens/s\), "
                               r"vocabulary %d \(sentencepiece\)$" % (len(shards), VOCAB))

    def test_a_job_trains_from_the_shards_and_samples_through_their_tokenizer(self):
        checkpoint = self.path("trained")
        run = Run(self.dir, example_spec(self.dataset, checkpoint))
        self.assertEqual(run.returncode, 0, run.output)
        code, out = pacictl("sample", "--checkpoint=" + checkpoint, "--prompt=And God said ✓",
                            "--max_tokens=20", "--seed=2", stderr=subprocess.DEVNULL)
        self.assertEqual(code, 0, out)
        # A character the corpus never had still encodes (byte fallback).
        self.assertTrue(out.startswith("And God said ✓"), out)
        self.assertGreater(len(out), len("And God said ✓"), out)

    def test_a_shard_of_another_tokenizer_fails_the_job_naming_it(self):
        other = self.path("genesis-char")
        code, out = pacictl("prepare-data", CORPUS, "--out=" + other, "--tokenizer=char")
        self.assertEqual(code, 0, out)
        mixed = self.path("mixed")
        shutil.copytree(self.dataset, mixed)
        foreign = sorted(n for n in os.listdir(other) if n.endswith(".bin"))[0]
        count = len([n for n in os.listdir(mixed) if n.endswith(".bin")])
        shutil.copy(os.path.join(other, foreign), os.path.join(mixed, "shard-%05d.bin" % count))
        self.foreign = "shard-%05d.bin" % count
        run = Run(self.dir, example_spec(mixed, self.path("never")))
        self.assertEqual(run.returncode, 1, run.output)
        self.assertIn(self.foreign, run.output)
        self.assertFalse(os.path.exists(self.path("never")) and os.listdir(self.path("never")))

    def test_a_truncated_shard_fails_the_job_naming_it(self):
        cut = self.path("cut")
        shutil.copytree(self.dataset, cut)
        shard = os.path.join(cut, sorted(n for n in os.listdir(cut) if n.endswith(".bin"))[0])
        with open(shard, "r+b") as f:
            f.truncate(os.path.getsize(shard) - 7)
        run = Run(self.dir, example_spec(cut, self.path("never-cut")))
        self.assertEqual(run.returncode, 1, run.output)
        self.assertIn(os.path.basename(shard), run.output)

    def test_bad_inputs_to_prepare_data_are_named_and_nothing_is_written(self):
        empty = self.path("empty.txt")
        open(empty, "w").close()
        not_a_model = self.path("not.model")
        with open(not_a_model, "w") as f:
            f.write("this is not a SentencePiece model\n")
        not_json = self.path("not-a.tokenizer.json")
        with open(not_json, "w") as f:
            f.write('{"model": {"type": "BPE", "vocab": ')
        fixture = os.path.join(SOURCE, "tests", "data", "byte-level-bpe.tokenizer.json")
        cases = [
            (["prepare-data", empty, "--tokenizer=char"], "empty.txt"),
            (["prepare-data", CORPUS, "--tokenizer=wordpiece"], "--tokenizer"),
            (["prepare-data", CORPUS, "--tokenizer_model=" + not_a_model], "not.model"),
            (["prepare-data", CORPUS, "--tokenizer_json=" + not_json],
             "--tokenizer_json: %s: not a tokenizer.json: " % not_json),
            (["prepare-data", CORPUS, "--tokenizer_json=" + fixture, "--tokenizer=char"],
             "--tokenizer_json: tokenizes with that tokenizer.json"),
            (["prepare-data", self.path("nothing-*.txt"), "--tokenizer=char"], "nothing-*.txt"),
        ]
        for i, (args, named) in enumerate(cases):
            out_dir = self.path("refused-%d" % i)
            code, out = pacictl(*(args + ["--out=" + out_dir]))
            self.assertEqual(code, 2, out)
            self.assertIn(named, out)
            self.assertFalse(os.path.exists(out_dir), out)
            self.assertEqual([n for n in os.listdir(self.dir) if n.startswith(".refused")], [])

    def test_a_spec_that_names_both_sources_or_a_bad_tokenizer_is_refused(self):
        both = example_spec(self.dataset, self.path("x"), corpus_path=CORPUS)
        run = Run(self.dir, both)
        self.assertEqual(run.returncode, 2, run.output)
        self.assertRegex(run.output, r"data\.(corpus_path|dataset)")
        bad = yaml.safe_load(example_spec(self.dataset, self.path("y")))
        del bad["data"]["dataset"]
        bad["data"].update(corpus_path=CORPUS, tokenizer="wordpiece")
        run = Run(self.dir, yaml.safe_dump(bad))
        self.assertEqual(run.returncode, 2, run.output)
        self.assertIn("data.tokenizer", run.output)


if __name__ == "__main__":
    unittest.main(verbosity=2)

#!/usr/bin/env python3
"""A trained model put to use, end to end: `pacictl train` with checkpoints,
then `pacictl export` read back by PyTorch (torch.jit.load) and checked against
the logits paci's training model wrote beside it, `pacictl sample`, and
fine-tuning a job of another stage count from the checkpoint
(checkpoint.init_from). Run by ctest with PACI_BUILD_DIR and PACI_SOURCE_DIR, in the
project's Python environment (build/python-env/bin/python: the torch whose LibTorch
paci links).
"""
import glob
import json
import os
import shutil
import tempfile
import unittest

import torch

from harness.pipeline import Run, pacictl, spec_text

PROMPT = "In the beginning God"


class ExportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        cls.ckpt = os.path.join(cls.dir, "source")
        # The head split by vocabulary (its first 30 rows on stage 0): every reader
        # of the checkpoint below (export, sampling, fine-tuning at another stage
        # count) joins the two stages' rows of it.
        cls.source = Run(cls.dir, spec_text(P=2, steps=60, eval_interval=30, partition="5/30",
                                            checkpoint="{directory: %s, interval: 30}" % cls.ckpt))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def setUp(self):
        self.assertEqual(self.source.returncode, 0, self.source.output)
        self.assertIn("head rows [0,30)", self.source.output)

    def test_an_export_loads_in_pytorch_and_computes_the_training_models_logits(self):
        out = self.path("model.pt")
        code, _, err = pacictl("export", "--checkpoint=" + self.ckpt, "--out=" + out)
        self.assertEqual(code, 0, err)
        extra = {"config.json": "", "tokenizer": "", "check.json": ""}
        module = torch.jit.load(out, _extra_files=extra)
        config = json.loads(extra["config.json"])
        self.assertEqual(config, {"vocab_size": 80, "num_layers": 4, "d_model": 32,
                                  "num_heads": 4, "seq_len": 32})
        self.assertTrue(extra["tokenizer"].startswith(b"paci-tokenizer char\n"))
        check = json.loads(extra["check.json"])
        tokens = torch.tensor(check["tokens"], dtype=torch.long)
        with torch.no_grad():
            logits = module(tokens)
            expected = torch.tensor(check["logits"])
            self.assertEqual(logits.shape, expected.shape)
            self.assertLess((logits - expected).abs().max().item(), 1e-5)
            # The cached decode gives the last position's logits too.
            last, k_cache, v_cache = module.decode(tokens, [], [])
            self.assertLess((last - expected[:, -1]).abs().max().item(), 1e-5)
            self.assertEqual(len(k_cache), 4)
        self.assertEqual(module.seq_len, 32)

    def test_sampling_with_a_seed_gives_the_same_text_twice(self):
        args = ["sample", "--checkpoint=" + self.ckpt, "--prompt=" + PROMPT, "--max_tokens=60",
                "--temperature=0.8", "--top_k=10", "--seed=7"]
        first = pacictl(*args)
        second = pacictl(*args)
        self.assertEqual(first[0], 0, first[2])
        self.assertTrue(first[1].startswith(PROMPT), first[1])
        self.assertGreater(len(first[1].rstrip("\n")), len(PROMPT))
        self.assertEqual(first[1], second[1])

    def test_sampling_refuses_a_character_the_tokenizer_does_not_know(self):
        code, out, err = pacictl("sample", "--checkpoint=" + self.ckpt, "--prompt=50% off")
        self.assertNotEqual(code, 0)
        self.assertIn("U+0025", err)
        self.assertEqual(out, "")

    def test_bad_checkpoint_folders_are_refused_naming_the_file_and_nothing_is_written(self):
        empty = self.path("empty")
        os.makedirs(empty, exist_ok=True)
        broken = self.path("broken")
        shutil.copytree(self.ckpt, broken)
        for step in (30, 60):
            os.remove(os.path.join(broken, "step-%08d" % step, "stage-1-of-2.pt"))
        corrupt = self.path("corrupt")
        shutil.copytree(self.ckpt, corrupt)
        corrupt_shard = os.path.join(corrupt, "step-00000060", "stage-1-of-2.pt")
        with open(corrupt_shard, "r+b") as f:
            f.seek(200)
            f.write(b"\x00\x11\x22")
        cases = {empty: empty, self.path("nowhere"): self.path("nowhere"),
                 broken: os.path.join(broken, "step-00000060", "stage-1-of-2.pt"),
                 corrupt: corrupt_shard}
        for folder, named in cases.items():
            out = self.path("refused.pt")
            code, _, err = pacictl("export", "--checkpoint=" + folder, "--out=" + out)
            self.assertNotEqual(code, 0, folder)
            self.assertIn(named, err)
            self.assertFalse(os.path.exists(out))
            self.assertEqual(glob.glob(glob.escape(out) + ".tmp*"), [])

    def test_fine_tuning_from_another_stage_count_starts_lower_than_a_fresh_job(self):
        tuned = Run(self.dir, spec_text(
            P=1, steps=4, eval_interval=2,
            checkpoint="{directory: %s, init_from: %s}" % (self.path("tuned"), self.ckpt)))
        fresh = Run(self.dir, spec_text(P=1, steps=4, eval_interval=2))
        self.assertEqual(tuned.returncode, 0, tuned.output)
        self.assertEqual(fresh.returncode, 0, fresh.output)
        tuned_loss = tuned.summary()["train_loss"][0]["loss"]
        fresh_loss = fresh.summary()["train_loss"][0]["loss"]
        self.assertLess(tuned_loss, fresh_loss - 0.3)
        self.assertTrue(os.path.exists(
            os.path.join(self.path("tuned"), "step-00000004", "stage-0-of-1.pt")))

    def test_fine_tuning_from_a_model_of_another_shape_is_refused_naming_the_field(self):
        wider = Run(self.dir, spec_text(
            P=1, steps=4, d_model=48,
            checkpoint="{directory: %s, init_from: %s}" % (self.path("wider"), self.ckpt)))
        self.assertNotEqual(wider.returncode, 0)
        self.assertIn("checkpoint.init_from", wider.output)
        self.assertIn("model.d_model is 32 there, 48 here", wider.output)
        self.assertFalse(os.path.exists(self.path("wider")))


if __name__ == "__main__":
    unittest.main(verbosity=2)

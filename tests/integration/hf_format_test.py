#!/usr/bin/env python3
"""paci's models through Hugging Face's own readers: a gpt2 and a llama (grouped-query
attention, SwiGLU, rotary positions) trained by `pacictl train` over two stages, exported
with `pacictl export --format=hf`, and loaded by transformers' AutoModelForCausalLM and
AutoTokenizer (the pinned transformers 5, safetensors and tokenizers of the project's
Python environment). Their logits must be those paci's training model computes (written
beside the TorchScript export, check.json) to 1e-4, sharded or not, and the tokenizer must
encode text to paci's ids. Run by ctest with PACI_BUILD_DIR and PACI_SOURCE_DIR.
"""
import json
import os
import tempfile
import unittest

import torch
import transformers

from harness.paths import CORPUS
from harness.pipeline import Run, pacictl, spec_text

LLAMA = ", architecture: llama, num_kv_heads: 2, ffn_hidden_size: 80, rope_theta: 500"
TEXT = "In the beginning God created the heaven and the earth."


class HfFormatTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        cls.runs = {}
        for arch, extra in (("gpt2", ""), ("llama", LLAMA)):
            ckpt = os.path.join(cls.dir, arch)
            cls.runs[arch] = (ckpt, Run(cls.dir, spec_text(
                name="hf-" + arch, P=2, steps=40, eval_interval=20, model_extra=extra,
                checkpoint="{directory: %s, interval: 20}" % ckpt)))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def checkpoint(self, arch):
        ckpt, run = self.runs[arch]
        self.assertEqual(run.returncode, 0, run.output)
        return ckpt

    def paci_logits(self, ckpt):
        """The tokens and logits of paci's training model, from the TorchScript export."""
        out = os.path.join(self.dir, os.path.basename(ckpt) + ".pt")
        code, _, err = pacictl("export", "--checkpoint=" + ckpt, "--out=" + out)
        self.assertEqual(code, 0, err)
        extra = {"check.json": ""}
        torch.jit.load(out, _extra_files=extra)
        check = json.loads(extra["check.json"])
        return torch.tensor(check["tokens"]), torch.tensor(check["logits"])

    def export(self, arch, *flags):
        folder = os.path.join(self.dir, "hf-%s%s" % (arch, "".join(flags).replace("-", "")))
        code, _, err = pacictl("export", "--format=hf", "--checkpoint=" + self.checkpoint(arch),
                               "--out=" + folder, *flags)
        self.assertEqual(code, 0, err)
        return folder

    def check_logits(self, arch, folder, model_class):
        tokens, expected = self.paci_logits(self.checkpoint(arch))
        model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
        self.assertEqual(type(model).__name__, model_class)
        with torch.no_grad():
            logits = model(tokens).logits
        self.assertEqual(logits.shape, expected.shape)
        self.assertLess((logits - expected).abs().max().item(), 1e-4)
        # Trained weights, not a fresh model: the prediction is far from uniform.
        self.assertGreater(logits.std().item(), 0.5)
        return model

    def test_transformers_computes_paci_gpt2s_logits(self):
        folder = self.export("gpt2")
        self.check_logits("gpt2", folder, "GPT2LMHeadModel")
        config = json.load(open(os.path.join(folder, "config.json")))
        self.assertEqual(config["activation_function"], "gelu")
        self.assertFalse(config["tie_word_embeddings"])

    def test_transformers_computes_paci_llamas_logits(self):
        folder = self.export("llama")
        model = self.check_logits("llama", folder, "LlamaForCausalLM")
        self.assertEqual(model.config.num_key_value_heads, 2)
        self.assertEqual(model.config.intermediate_size, 80)

    def test_a_sharded_export_loads_through_its_index(self):
        folder = self.export("llama", "--max_shard_bytes=40000")
        index = json.load(open(os.path.join(folder, "model.safetensors.index.json")))
        shards = set(index["weight_map"].values())
        self.assertGreater(len(shards), 2)
        self.assertFalse(os.path.exists(os.path.join(folder, "model.safetensors")))
        self.check_logits("llama", folder, "LlamaForCausalLM")

    def test_autotokenizer_encodes_text_to_pacis_ids(self):
        folder = self.export("gpt2")
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        with open(CORPUS, encoding="utf-8") as f:
            alphabet = sorted(set(f.read()))  # the character tokenizer: ids by code point
        expected = [alphabet.index(c) for c in TEXT]
        self.assertEqual(tokenizer(TEXT)["input_ids"], expected)
        self.assertEqual(tokenizer.decode(expected), TEXT)

    def transformers_llama(self, name, tied):
        """A random LlamaForCausalLM of the test's shape, made and saved by transformers."""
        config = transformers.LlamaConfig(
            vocab_size=80, hidden_size=32, intermediate_size=80, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
            rms_norm_eps=1e-5, rope_theta=500.0, tie_word_embeddings=tied)
        torch.manual_seed(3)
        model = transformers.LlamaForCausalLM(config).eval()
        folder = os.path.join(self.dir, name)
        model.save_pretrained(folder)
        return model, folder

    def fine_tune(self, name, folder, lr, steps):
        ckpt = os.path.join(self.dir, name + "-ckpt")
        spec = spec_text(name=name, P=2, steps=steps, eval_interval=steps // 2 or 1,
                         model_extra=LLAMA,
                         checkpoint="{directory: %s, init_from: %s}" % (ckpt, folder))
        spec = spec.replace("lr: 3e-3, warmup_fraction: 0.1",
                            "lr: %g, warmup_fraction: 0.1, weight_decay: 0" % lr)
        run = Run(self.dir, spec)
        self.assertEqual(run.returncode, 0, run.output)
        return ckpt, run

    def test_a_job_starts_from_a_transformers_model_with_its_logits(self):
        # tied: lm_head is the embedding, absent from the file; paci unties it.
        for tied in (False, True):
            model, folder = self.transformers_llama("made-by-hf-%s" % tied, tied)
            # One step at lr 1e-9 leaves the weights as they came (to ~1e-9).
            ckpt, _ = self.fine_tune("starts-%s" % str(tied).lower(), folder, 1e-9, 1)
            tokens, paci = self.paci_logits(ckpt)
            with torch.no_grad():
                expected = model(tokens).logits
            self.assertLess((paci - expected).abs().max().item(), 1e-4, "tied=%s" % tied)

    def test_a_transformers_model_fine_tunes_with_falling_loss(self):
        _, folder = self.transformers_llama("made-by-hf-tune", False)
        _, run = self.fine_tune("tunes", folder, 3e-3, 40)
        losses = [p["loss"] for p in run.summary()["train_loss"]]
        self.assertLess(losses[-1], losses[0] - 0.5, losses)

    def test_an_hf_folder_of_another_shape_is_refused_naming_the_field(self):
        _, folder = self.transformers_llama("made-by-hf-shape", False)
        spec = spec_text(name="wrong-shape", P=2, steps=2, eval_interval=1,
                         checkpoint="{init_from: %s}" % folder)  # a gpt2 spec
        run = Run(self.dir, spec)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("model.architecture is llama there, gpt2 here", run.output)

    def test_a_bad_format_is_refused_naming_the_flag(self):
        code, _, err = pacictl("export", "--format=onnx", "--checkpoint=" + self.checkpoint("gpt2"),
                               "--out=" + os.path.join(self.dir, "x"))
        self.assertNotEqual(code, 0)
        self.assertIn("--format", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)

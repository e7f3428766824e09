#!/usr/bin/env python3
"""paci's models through Hugging Face's own readers: a gpt2 and a llama (grouped-query
attention, SwiGLU, rotary positions) trained by `pacictl train` over two stages, exported
with `pacictl export --format=hf`, and loaded by transformers' AutoModelForCausalLM and
AutoTokenizer (the pinned transformers 5, safetensors and tokenizers of the project's
Python environment). Their logits must be those paci's training model computes (written
beside the TorchScript export, check.json) to 1e-4, sharded or not, and the tokenizer must
encode text to paci's ids. A dataset prepared with a Hugging Face tokenizer.json (GPT-2's
byte-level BPE, tests/data/byte-level-bpe.tokenizer.json) holds the ids Python's tokenizers
gives each whole input file, and its model's export carries that tokenizer.json, which
AutoTokenizer reads to the same ids. Run by ctest with PACI_BUILD_DIR and PACI_SOURCE_DIR.
"""
import json
import os
import struct
import tempfile
import unittest

import tokenizers
import torch
import transformers

from harness.paths import CORPUS, SOURCE
from harness.pipeline import Run, pacictl, spec_text

LLAMA = ", architecture: llama, num_kv_heads: 2, ffn_hidden_size: 80, rope_theta: 500"
TEXT = "In the beginning God created the heaven and the earth."
TOKENIZER_JSON = os.path.join(SOURCE, "tests", "data", "byte-level-bpe.tokenizer.json")
# Lines where a byte-level pre-tokenizer splits differently when the text is cut at the
# newline: trailing and leading spaces, blank lines, punctuation, digits, emoji.
AWKWARD = "end \n start\n\n\nword \n'tis 12\n34 (x)\n\"y\"\n\u00e9t\u00e9 \U0001F600\n\n"
DOCUMENTS = ["And God said, Let there be light: and there was light.",
             "Two paragraphs.\n\nThe second one \U0001F44D\n", " a leading space", "42"]


def read_dataset_ids(folder):
    """The token ids of a dataset's shards, in order (worker/data/token_shards.h)."""
    ids = []
    for name in sorted(n for n in os.listdir(folder) if n.endswith(".bin")):
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        width, count = struct.unpack_from("<IQ", data, 12)
        ids += struct.unpack_from("<%d%s" % (count, "H" if width == 2 else "I"), data, 48)
    return list(ids)


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
        # prepare-data with the tokenizer.json: a text file of more than one chunk (1 MiB)
        # with awkward lines in each copy of Genesis, and a JSONL file.
        with open(CORPUS, encoding="utf-8") as f:
            genesis = f.read()
        cls.texts = {"genesis6.txt": "".join(genesis + AWKWARD for _ in range(6)),
                     "documents.jsonl": "".join(d + "\n" for d in DOCUMENTS)}
        with open(os.path.join(cls.dir, "genesis6.txt"), "w", encoding="utf-8") as f:
            f.write(cls.texts["genesis6.txt"])
        with open(os.path.join(cls.dir, "documents.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"text": d}) + "\n" for d in DOCUMENTS)
        cls.json_dataset = os.path.join(cls.dir, "genesis-tokenizer-json")
        cls.prepared = pacictl("prepare-data", os.path.join(cls.dir, "genesis6.txt"),
                               os.path.join(cls.dir, "documents.jsonl"),
                               "--tokenizer_json=" + TOKENIZER_JSON,
                               "--out=" + cls.json_dataset, "--shard_tokens=100000")

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

    def json_dataset_ids(self):
        code, _, err = self.prepared
        self.assertEqual(code, 0, err)
        self.assertIn("vocabulary 400 (tokenizer_json)", err)
        return read_dataset_ids(self.json_dataset)

    def test_prepare_data_gives_python_tokenizers_ids_of_each_whole_file(self):
        self.assertGreater(len(self.texts["genesis6.txt"].encode()), 1 << 20)  # > one chunk
        reference = tokenizers.Tokenizer.from_file(TOKENIZER_JSON)
        expected = []
        for name in ("genesis6.txt", "documents.jsonl"):
            expected += reference.encode(self.texts[name], add_special_tokens=False).ids
        ids = self.json_dataset_ids()
        self.assertEqual(len(ids), len(expected))
        self.assertEqual(ids, expected)
        self.assertEqual(reference.decode(ids[-8:]), reference.decode(expected[-8:]))

    def test_autotokenizer_of_a_tokenizer_json_model_gives_pacis_ids(self):
        ids = self.json_dataset_ids()
        ckpt = os.path.join(self.dir, "tokenizer-json")
        spec = spec_text(name="hf-tokenizer-json", P=2, steps=10, eval_interval=5,
                         checkpoint="{directory: %s, interval: 10}" % ckpt)
        spec = spec.replace("vocab_size: 80", "vocab_size: 400").replace(
            "corpus_path: " + CORPUS, "dataset: " + self.json_dataset)
        run = Run(self.dir, spec)
        self.assertEqual(run.returncode, 0, run.output)
        folder = os.path.join(self.dir, "hf-tokenizer-json")
        code, _, err = pacictl("export", "--format=hf", "--checkpoint=" + ckpt, "--out=" + folder)
        self.assertEqual(code, 0, err)
        with open(os.path.join(folder, "tokenizer.json"), "rb") as f, \
                open(TOKENIZER_JSON, "rb") as g:
            self.assertEqual(f.read(), g.read())
        config = json.load(open(os.path.join(folder, "tokenizer_config.json")))
        self.assertEqual(config["tokenizer_class"], "PreTrainedTokenizerFast")
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        encoded = []
        for name in ("genesis6.txt", "documents.jsonl"):
            encoded += tokenizer(self.texts[name], add_special_tokens=False)["input_ids"]
        self.assertEqual(encoded, ids)
        self.assertEqual(tokenizer.decode(tokenizer(DOCUMENTS[1])["input_ids"]), DOCUMENTS[1])
        model = transformers.AutoModelForCausalLM.from_pretrained(folder)
        self.assertEqual(model.config.vocab_size, 400)

    def test_autotokenizer_of_a_sentencepiece_model_gives_pacis_ids(self):
        # A bpe SentencePiece model trained by prepare-data; the model exported with it as
        # tokenizer.model, which transformers' LlamaTokenizer reads (with sentencepiece).
        dataset = os.path.join(self.dir, "genesis-sp")
        code, _, err = pacictl("prepare-data", CORPUS, "--tokenizer=bpe", "--vocab_size=500",
                               "--out=" + dataset)
        self.assertEqual(code, 0, err)
        ckpt = os.path.join(self.dir, "sp")
        spec = spec_text(name="hf-sp", P=2, steps=4, eval_interval=2,
                         checkpoint="{directory: %s, interval: 4}" % ckpt)
        spec = spec.replace("vocab_size: 80", "vocab_size: 500").replace(
            "corpus_path: " + CORPUS, "dataset: " + dataset)
        run = Run(self.dir, spec)
        self.assertEqual(run.returncode, 0, run.output)
        folder = os.path.join(self.dir, "hf-sp")
        code, _, err = pacictl("export", "--format=hf", "--checkpoint=" + ckpt, "--out=" + folder)
        self.assertEqual(code, 0, err)
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        self.assertEqual(type(tokenizer).__name__, "LlamaTokenizer")
        # paci's ids of a text: a dataset of it alone, tokenized with the exported model.
        text = TEXT + "\n  And God said, Let there be light: and there was light.\n\n\u00e9t\u00e9 42"
        with open(os.path.join(self.dir, "sp-text.txt"), "w", encoding="utf-8") as f:
            f.write(text)
        ids_dir = os.path.join(self.dir, "sp-text")
        code, _, err = pacictl("prepare-data", os.path.join(self.dir, "sp-text.txt"),
                               "--tokenizer_model=" + os.path.join(folder, "tokenizer.model"),
                               "--out=" + ids_dir)
        self.assertEqual(code, 0, err)
        ids = read_dataset_ids(ids_dir)
        self.assertGreater(len(ids), 20)
        self.assertEqual(tokenizer(text, add_special_tokens=False)["input_ids"], ids)
        self.assertEqual(tokenizer.decode(ids), text)

    def test_a_tokenizer_json_larger_than_the_model_is_refused_naming_the_field(self):
        self.json_dataset_ids()
        spec = spec_text(name="hf-tokenizer-json-small", P=2, steps=2, eval_interval=1)
        spec = spec.replace("vocab_size: 80", "vocab_size: 300").replace(
            "corpus_path: " + CORPUS, "dataset: " + self.json_dataset)
        run = Run(self.dir, spec)
        self.assertNotEqual(run.returncode, 0, run.output)
        self.assertIn("model.vocab_size", run.output)
        self.assertIn("400 tokens", run.output)

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

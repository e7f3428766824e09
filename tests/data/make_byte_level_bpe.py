"""Writes tests/data/byte-level-bpe.tokenizer.json: a GPT-2-style byte-level BPE
(tokenizers' ByteLevel pre-tokenizer and decoder, no prefix space, all 256
bytes in the alphabet, <|endoftext|> as its one special token) of 400 tokens,
trained by Python's tokenizers (the version third_party/python pins) on the
test corpus tests/data/kjv-genesis.txt. Run from the repository root:

    build/python-env/bin/python tests/data/make_byte_level_bpe.py
"""

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

CORPUS = "tests/data/kjv-genesis.txt"
OUT = "tests/data/byte-level-bpe.tokenizer.json"

tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
trainer = trainers.BpeTrainer(vocab_size=400, min_frequency=2, show_progress=False,
                              special_tokens=["<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tokenizer.train([CORPUS], trainer)
tokenizer.save(OUT, pretty=True)
print(f"{OUT}: {tokenizer.get_vocab_size()} tokens")

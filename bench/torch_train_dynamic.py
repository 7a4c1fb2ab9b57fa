"""Training over varying sizes from PyTorch (issue 22): reduced Hugging Face models (random
weights, dropout off so eager is a reference) trained through torch.compile(backend="tgraph_train",
dynamic=True) at four batch x length sizes; per size the step's time, the loss and the largest
gradient difference against eager, and the executables compiled so far.
    PYTHONPATH=build/python python3 bench/torch_train_dynamic.py [bert roberta gpt2 llama qwen2 t5]"""
import sys
import time

import torch
import transformers

import tgraph.torch as tgt

SIZES = [(4, 16), (3, 24), (5, 12), (2, 40)]
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=1000)


def model(name: str):
    if name == "gpt2":
        cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=1000, resid_pdrop=0.0,
                                      embd_pdrop=0.0, attn_pdrop=0.0)
        return transformers.GPT2LMHeadModel(cfg)
    if name == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL, num_key_value_heads=2))
    if name == "bert":
        return transformers.BertForMaskedLM(transformers.BertConfig(**SMALL, hidden_dropout_prob=0.0,
                                                                    attention_probs_dropout_prob=0.0))
    if name == "roberta":
        return transformers.RobertaForMaskedLM(transformers.RobertaConfig(
            **SMALL, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=64))
    if name == "qwen2":
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**SMALL, num_key_value_heads=2))
    if name == "t5":
        return transformers.T5ForConditionalGeneration(transformers.T5Config(
            d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16, vocab_size=1000, dropout_rate=0.0,
            decoder_start_token_id=0, pad_token_id=0))
    raise SystemExit(f"unknown model {name}")


def main():
    for name in sys.argv[1:] or ["bert", "roberta", "gpt2", "llama", "qwen2", "t5"]:
        torch.manual_seed(0)
        m, ref = model(name).train(), model(name).train()
        ref.load_state_dict(m.state_dict())
        fast = torch.compile(m, backend="tgraph_train", dynamic=True)
        before = tgt.stats()["executables"]
        for b, s in SIZES:
            ids = torch.randint(0, 1000, (b, s))
            m.zero_grad()
            ref.zero_grad()
            t = time.perf_counter()
            out = fast(input_ids=ids, labels=ids)
            out.loss.backward()
            dt = time.perf_counter() - t
            want = ref(input_ids=ids, labels=ids)
            want.loss.backward()
            err = max(float((p.grad - q.grad).abs().max()) for p, q in zip(m.parameters(), ref.parameters())
                      if p.grad is not None)
            print(f"| {name} | {b} x {s} | {dt:.2f} s | {float(out.loss):.5f} ({float(want.loss):.5f}) | {err:.1e} | "
                  f"{tgt.stats()['executables'] - before} |", flush=True)


if __name__ == "__main__":
    main()

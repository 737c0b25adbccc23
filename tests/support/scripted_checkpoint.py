"""A tiny HF checkpoint whose greedy answer is a script: the tool-call tests' model.

Its layers add nothing to the residual stream (every ``o_proj`` and ``down_proj`` is zero), so the
logits depend on the current token alone: a bigram model. The prompt's last token and each piece of
the script get orthogonal embeddings, and the lm_head maps each one to the next piece (the last to
EOS), so greedy decoding after any prompt that ends with the generation prompt writes the script,
whatever the weights of attention. Each script piece is one added token (so no piece repeats a
token and the chain cannot loop). Other test modules import it from tests/support/.
"""
from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import AddedToken

from checkpoints import build_bpe_tokenizer, hf_config

# A ChatML template in the Hermes way (Qwen2.5's format): tools in the system turn, calls as
# <tool_call> blocks, tool answers as <tool_response> in a user turn.
HERMES_TEMPLATE = """\
{%- if tools %}<|im_start|>system
{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}

{% endif %}You may call functions. Their signatures:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
To call one, answer <tool_call>{"name": NAME, "arguments": {...}}</tool_call>.<|im_end|>
{% elif messages[0]['role'] == 'system' %}<|im_start|>system
{{ messages[0]['content'] }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message['role'] == 'system' %}
{%- elif message['role'] == 'tool' %}<|im_start|>user
<tool_response>
{{ message['content'] }}
</tool_response><|im_end|>
{% elif message['role'] == 'assistant' %}<|im_start|>assistant
{{ message['content'] or '' }}
{%- for call in message.tool_calls or [] %}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% else %}<|im_start|>{{ message['role'] }}
{{ message['content'] }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
HERMES_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
HERMES_SCRIPT = ["<tool_call>", '\n{"name": "get_weather", ', '"arguments": {"city": ', '"Paris"}}', "\n</tool_call>"]

# A Llama 3.1-like template: JSON calls ({"name", "parameters"}), tool answers in the ipython role.
LLAMA3_TEMPLATE = """\
<|begin_of_text|>
{%- if tools %}<|start_header_id|>system<|end_header_id|>

To call a function, answer {"name": NAME, "parameters": {...}}. Functions:
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}<|eot_id|>
{%- endif %}
{%- for message in messages %}
{%- if message['role'] == 'tool' %}<|start_header_id|>ipython<|end_header_id|>

{{ message['content'] }}<|eot_id|>
{%- elif message['role'] == 'assistant' and message.tool_calls %}<|start_header_id|>assistant<|end_header_id|>

{% for call in message.tool_calls %}{"name": "{{ call.function.name }}", "parameters": \
{{ call.function.arguments | tojson }}}{% endfor %}<|eot_id|>
{%- else %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>

{{ message['content'] }}<|eot_id|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}"""
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|python_tag|>"]
LLAMA3_SCRIPT = ["<|python_tag|>", '{"name": "get_weather", ', '"parameters": {"city": ', '"Paris"}}']

FAMILIES = {"hermes": (HERMES_TEMPLATE, HERMES_SPECIALS, "<|im_end|>", HERMES_SCRIPT),
            "llama3_json": (LLAMA3_TEMPLATE, LLAMA3_SPECIALS, "<|eot_id|>", LLAMA3_SCRIPT)}


def write_scripted_checkpoint(directory, family: str) -> Path:
    """Write the scripted model of ``family`` ("hermes" or "llama3_json"); returns the directory."""
    import jinja2
    import transformers

    template, specials, eos, script = FAMILIES[family]
    directory = Path(directory)
    backend = build_bpe_tokenizer(specials, bos=None)
    backend.add_tokens([AddedToken(piece, normalized=False) for piece in script
                        if backend.token_to_id(piece) is None])
    hf_tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=eos,
                                                        chat_template=template)
    prompt = hf_tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                              tokenize=False)
    start = backend.encode(prompt, add_special_tokens=False).ids[-1]
    chain = [start, *(backend.token_to_id(piece) for piece in script), backend.token_to_id(eos)]
    if len(set(chain)) != len(chain) or None in chain:
        raise jinja2.TemplateError(f"the script of {family} does not make a chain of distinct tokens: {chain}")

    config = hf_config("llama", eos_token_id=chain[-1], bos_token_id=None, max_position_embeddings=1024)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    hidden = config.hidden_size
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                param.zero_()                       # the layers add nothing: the logits read the token alone
            elif name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=generator) / hidden ** 0.5)
        embed, head = model.model.embed_tokens.weight, model.lm_head.weight
        head.zero_()
        for i, (token, following) in enumerate(zip(chain, chain[1:])):
            embed[token] = 0.0
            embed[token, i] = 1.0                    # orthogonal: token i's hidden state is basis vector i
            head[following, i] = 10.0                # ... whose logit is highest for the next piece
    model.generation_config = transformers.GenerationConfig(eos_token_id=[chain[-1]])
    model.save_pretrained(directory, safe_serialization=True)
    hf_tokenizer.save_pretrained(directory)
    return directory

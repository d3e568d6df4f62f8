#!/usr/bin/env python3
"""Renders every chat template in tests/data/chat_templates/ with Python jinja2, exactly the way
Hugging Face transformers' apply_chat_template does, over a fixed set of conversations, and writes
tests/data/chat_templates/expected.json: the oracle tests/tokenizer/chat_template_test.cc compares
sinkq's C++ renderer against, byte for byte.

The environment copies transformers' behaviour (transformers/utils/chat_template_utils.py):
  - jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
    extensions=[jinja2.ext.loopcontrols, <the {% generation %} tag, which renders its body>]);
  - globals raise_exception(message) (raises jinja2.exceptions.TemplateError(message)) and
    strftime_now(format) (datetime.now().strftime(format) -- here a fixed time, FIXED_NOW, so the
    output is reproducible; the C++ test passes the same time);
  - the tojson filter is json.dumps(x, ensure_ascii=False, indent, separators, sort_keys);
  - render(messages=..., tools=..., documents=..., add_generation_prompt=..., **special tokens,
    **kwargs), tools and documents being None when absent, as apply_chat_template passes them.

Each case is {template, conversation, add_generation_prompt, kwargs} and one of
  "expected": the rendered text,
  "refused": the message of the template's own raise_exception(),
  "error":   "<Python exception type>: <message>" for any other failure (an undefined variable
             used, a TypeError, ...).
The variables of a case are conversations[conversation] (messages, tools) + documents=None +
add_generation_prompt + special_tokens[template] + kwargs.

Usage: python3 scripts/chat_template_expectations.py   (needs jinja2; tested with 3.1.6)
"""

import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "chat_templates")
FIXED_NOW = datetime.datetime(2025, 3, 7, 9, 5, 2)


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker when not tracking: {% generation %}body{% endgeneration %}
    renders body (through a caller, so its {% set %}s stay inside)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# Special tokens each model's tokenizer passes (transformers passes the tokenizer's
# special_tokens_map: only the tokens it has).
LLAMA3 = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
DEEPSEEK = {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}
SPM = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
SPECIAL_TOKENS = {
    "command-r-plus-tool_use.jinja": {"bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>"},
    "command-r7b-12-2024-tool_use.jinja": {"bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>"},
    "deepseek-r1-distill-qwen-32b.jinja": DEEPSEEK,
    "deepseek-v3.1.jinja": DEEPSEEK,
    "firefunction-v2.jinja": LLAMA3,
    "functionary-medium-v3.2.jinja": LLAMA3,
    "gemma-2-2b-it.jinja": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
    "gemma-3-it.jinja": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
    "gpt-oss-120b.jinja": {"bos_token": "<|startoftext|>", "eos_token": "<|return|>"},
    "granite-3.3-2b-instruct.jinja": {"bos_token": "<|end_of_text|>", "eos_token": "<|end_of_text|>"},
    "hermes-3-llama-3.1-8b-tool_use.jinja": {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"},
    "kimi-k2.jinja": {"bos_token": "[BOS]", "eos_token": "[EOS]"},
    "llama-2-chat.jinja": SPM,
    "llama-2-chat-default-system.jinja": SPM,
    "llama-3.1-8b-instruct.jinja": LLAMA3,
    "llama-3.2-3b-instruct.jinja": LLAMA3,
    "mistral-nemo-instruct-2407.jinja": SPM,
    "mistral-small-3.2-24b-instruct-2506.jinja": SPM,
    "mistral-v3-spm.jinja": SPM,
    "nemotron-nano-v2.jinja": {"bos_token": "<SPECIAL_10>", "eos_token": "<SPECIAL_12>"},
    "phi-3-mini.jinja": {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>"},
    "phi-3.5-mini-instruct.jinja": {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>"},
    "phi-4.jinja": {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|dummy_87|>"},
    "qwen2.5-7b-instruct.jinja": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "qwen3.jinja": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "smollm2-135m-instruct.jinja": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
    "smollm3-3b.jinja": {"eos_token": "<|im_end|>", "pad_token": "<|im_end|>"},
    "smolvlm.jinja": {"bos_token": "<|im_start|>", "eos_token": "<end_of_utterance>"},
    "vicuna.jinja": SPM,
}

# Extra template kwargs (apply_chat_template(..., **kwargs)) each template is also rendered with.
EXTRA_KWARGS = {
    "qwen3.jinja": [{"enable_thinking": False}],
    "smollm3-3b.jinja": [{"enable_thinking": False}],
    "deepseek-v3.1.jinja": [{"thinking": True}],
    "granite-3.3-2b-instruct.jinja": [{"thinking": True}, {"controls": {"citations": True}}],
    "gpt-oss-120b.jinja": [{"reasoning_effort": "high", "model_identity": "You are a test model.", "builtin_tools": ["browser", "python"]}],
    "llama-3.1-8b-instruct.jinja": [{"builtin_tools": ["code_interpreter", "brave_search"]}, {"date_string": "01 Jan 2025"}],
    "llama-3.2-3b-instruct.jinja": [{"date_string": "01 Jan 2025"}, {"tools_in_user_message": False}],
    "nemotron-nano-v2.jinja": [{"enable_thinking": False}],
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city – “now”, 🌦",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
                "days": {"type": "integer", "description": "Forecast days", "default": 1, "minimum": 1},
                "hourly": {"type": "array", "items": {"type": "number"}, "description": "Hours of interest"},
                "precise": {"type": ["boolean", "integer"], "description": "Decimals wanted"},
            },
            "required": ["location"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time.\nTab:\there, quote: \"q\", backslash: \\, control: \u0001",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
}
NULLABLE_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": ["string", "null"], "description": "What to look for"}},
            "required": ["query"],
        },
    },
}
TOOL_CALL = {
    "id": "call12345",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius", "days": 2}},
}

U = lambda text: {"role": "user", "content": text}  # noqa: E731
A = lambda text: {"role": "assistant", "content": text}  # noqa: E731
SYS = lambda text: {"role": "system", "content": text}  # noqa: E731

CONVERSATIONS = {
    "user": {"messages": [U("Hello Café 世界 👋")]},
    "system_user": {"messages": [SYS("Be brief."), U("What is 2+2?")]},
    "multi_turn": {"messages": [SYS("Be brief."), U("What is 2+2?"), A("4."), U("Why?")]},
    "multi_turn_no_system": {"messages": [U("Hi"), A("Hello! How can I help?"), U("Tell me a joke.")]},
    "assistant_last": {"messages": [U("Hi"), A("Hello, I am")]},
    "empty_content": {"messages": [U("")]},
    "whitespace_specials": {
        "messages": [
            SYS("  You are\n\ta bot.  "),
            U("  Line one\nLine two \"quoted\" 'single' \\ {{ not a tag }} {% neither %} \u2028 end  "),
        ]
    },
    "unicode": {"messages": [U("Ünïcödé – “quotes” – 日本語 – 🚀 – \u00a0nbsp – e\u0301")]},
    "bad_alternation": {"messages": [U("A"), U("B")]},
    "system_only": {"messages": [SYS("Only a system prompt.")]},
    "no_messages": {"messages": []},
    "content_parts": {
        "messages": [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe this image."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
            {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]},
        ]
    },
    "thinking": {"messages": [U("2+2?"), A("<think>\nadd them\n</think>\n\n4"), U("And 3+3?")]},
    "tools": {"messages": [SYS("You can call tools."), U("What's the weather in Paris?")], "tools": [WEATHER_TOOL, TIME_TOOL]},
    # Command R+ and Hermes 3 recurse without end on the "null" type (a str is iterable): an error.
    "tools_nullable": {"messages": [U("Search for cats.")], "tools": [NULLABLE_TOOL]},
    # OpenAI-style tool calls, whose arguments are a JSON string (some templates concatenate them).
    "tool_calls_string_arguments": {
        "messages": [
            U("What's the weather in Paris?"),
            {"role": "assistant", "content": None, "tool_calls": [{**TOOL_CALL, "function": {
                "name": "get_weather", "arguments": '{"location": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "21 C"},
        ],
        "tools": [WEATHER_TOOL],
    },
    "tool_calls": {
        "messages": [
            U("What's the weather in Paris?"),
            {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
            {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": '{"temperature": 21, "sky": "clear"}'},
            A("It is 21 °C and clear in Paris."),
            U("Thanks."),
        ],
        "tools": [WEATHER_TOOL],
    },
}

# Template kwargs a template needs (it fails without them), passed in all its cases.
BASE_KWARGS = {
    "firefunction-v2.jinja": {
        "functions": json.dumps([WEATHER_TOOL["function"]], indent=2, ensure_ascii=False),
        "datetime": "2025-03-07 09:05",
    },
}

# Conversations also rendered with add_generation_prompt=False (all are rendered with True).
WITHOUT_GENERATION_PROMPT = ["user", "multi_turn", "assistant_last", "tool_calls"]


# Small templates, one construct each: the C++ test renders them with SNIPPET_VARS and compares
# with what jinja2 gives (or the error it raises).
SNIPPET_VARS = {
    "m": [
        {"role": "system", "content": "S", "n": 1},
        {"role": "user", "content": "U1", "n": 2},
        {"role": "assistant", "content": "A1", "n": 3},
        {"role": "user", "content": "U2", "n": 4},
    ],
    "d": {"a": 1, "items": "I", "title": "T", "update": "U", "keys": "K"},
    "x": {"b": [1, 2.5, None, True, "é"], "a": {"z": "y", "e": []}},
    "top": "TOP",
    "n3": 3,
    "nothing": None,
    "nested": [[1, 2], [3, 4]],
}

SNIPPETS = [
    # whitespace control, trim_blocks, lstrip_blocks, comments, raw
    ("strip_signs", "a  {%- if true %} b {% endif -%}  c"),
    ("trim_blocks", "{% if true %}\nX\n{% endif %}\nY"),
    ("lstrip_blocks", "  {% if true %}\n  X\n  {% endif %}\nY"),
    ("lstrip_tab_unicode_space", "\t{% if true %}x{% endif %}\n\u3000{% if true %}y{% endif %}"),
    ("lstrip_keeps_text", "a {% if true %}x{% endif %}"),
    ("plus_keeps_indent", "  {%+ if true %}x{% endif %}"),
    ("plus_keeps_newline", "{% if true +%}\nx{% endif %}"),
    ("var_not_lstripped", "  {{ 'x' }}\n  {{ 'y' }}"),
    ("var_strip_signs", "a {{- 'x' -}} \n b"),
    ("var_minus_number_quirk", "{{-1}}"),
    ("comment", "a {# c #} b\n  {# line comment #}\nc {#- d -#} e"),
    ("comment_trim_newline", "{# c #}\nx"),
    ("raw", "{% raw %}{{ x }}{% if %}{% endraw %}"),
    ("raw_whitespace", "  {% raw %}\n{{ y }}\n  {% endraw %}\nz"),
    ("raw_minus", "a {%- raw -%}  b  {%- endraw -%} c"),
    ("trailing_newline_dropped", "a\n"),
    ("only_one_trailing_newline_dropped", "a\n\n"),
    ("crlf", "a\r\nb\rc"),
    ("line_start_after_var_strip", "{{ 'a' -}}\n  {% if true %}b{% endif %}"),
    ("minus_both_sides", "{%- if true -%}\n\n  x  \n\n{%- endif -%}"),
    ("block_end_newline_only_one", "{% if true %}\n\nx{% endif %}"),
    # literals and printing (Python str/repr)
    ("constants", "{{ none }}|{{ None }}|{{ true }}|{{ False }}|{{ 1 }}|{{ 1.5 }}|{{ 1e3 }}|{{ 0x1F }}|{{ 0b101 }}|{{ 0o17 }}|{{ 1_000 }}|{{ 0.1 + 0.2 }}"),
    ("list_repr", "{{ [1, 'a', none, true, 1.5, nope] }}"),
    ("tuple_repr", "{{ (1,) }}{{ () }}{{ (1, 'b') }}"),
    ("dict_repr", "{{ {'a': 1, 'b': [1, {'c': none}], 2: 'two'} }}{{ {} }}{{ [] }}"),
    ("str_repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'back\\\\slash'] }}"),
    ("str_repr_escapes", "{{ ['\\t\\n\\r\\x00\\x1f\\x7f\\x85\\xa0\\u200b\\u2028 é 日 😀'] }}"),
    ("string_escapes", "{{ 'a\\tb\\nc\\x41\\u00e9\\U0001F600\\\\ \\d \\101 \\'' }}"),
    ("adjacent_strings", "{{ 'a' \"b\" 'c' }}"),
    ("floats", "{{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 0.0001 }} {{ -0.0 }} {{ 1/3 }} {{ 2**0.5 }} {{ 10/2 }} {{ 3.0 }} {{ 1.5e300 * 1e10 }} {{ 123456789.125 }}"),
    ("print_tuple", "{{ 1, 'a' }}"),
    ("print_statement", "{% print 'a', 1 %}"),
    ("values", "{{ x }}|{{ m[0] }}|{{ nested }}|{{ nothing }}"),
    # operators
    ("arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ -2 ** 2 }} {{ 2 ** 62 }} {{ 10 - -2 }} {{ true + 1 }} {{ 1 + 2.0 }}"),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 * 3 ** 2 }} {{ 'a' ~ 1 ~ none ~ nope }} {{ 1 ~ 2 + 3 ~ 4 if false else 'x' }}"),
    ("concat_binds_tighter_than_plus", "{{ 'a' + 'b' ~ 'c' }}"),
    ("sequence_ops", "{{ 'ab' * 3 }} {{ 3 * 'ab' }} {{ 'ab' * -1 }} {{ [1] * 2 }} {{ [1] + [2] }} {{ (1,) + (2,) }} {{ 'a' + 'b' }}"),
    ("equality", "{{ 1 == 1.0 }} {{ 1 == true }} {{ 'a' == 'a' }} {{ [1, 2] == [1, 2] }} {{ (1, 2) == [1, 2] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ none == none }} {{ nope == none }} {{ nope == nope2 }} {{ 1 != '1' }}"),
    ("ordering", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 'Z' < 'a' }} {{ 'é' > 'z' }} {{ 2 >= 2.0 }} {{ 1 <= 0 }}"),
    ("membership", "{{ 'a' in 'cat' }} {{ 'x' not in 'cat' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'k' in nope }} {{ 'role' in m[0] }} {{ m[0] in m }}"),
    ("logic", "{{ nope and 1 }}|{{ 0 or 'x' }}|{{ 1 and 'y' }}|{{ '' or [] }}|{{ not 0 }}|{{ not 'a' }}|{{ not nope is defined }}|{{ none or nothing }}"),
    ("conditional_expression", "{{ 'yes' if 1 else 'no' }}|{{ 'yes' if 0 }}|{{ 'a' if 0 else 'b' if 1 else 'c' }}|{{ ('y' if 0) is defined }}"),
    ("unary", "{{ -1 }} {{ +1 }} {{ - - 2 }} {{ -n3 }} {{ -n3 | abs }} {{ not not 1 }}"),
    ("percent_operator", "{{ '%s-%s' % (1, 'a') }}|{{ '%d%%' % 5 }}|{{ '%(k)s!' % {'k': 'v'} }}|{{ '%r' % 'q' }}|{{ '%5.1f|%-4d|%x' % (3.14159, 7, 255) }}"),
    # tests
    ("type_tests", "{% for v in [none, true, 0, 1.5, 'a', [], {}, nope, m] %}{{ v is defined }},{{ v is none }},{{ v is boolean }},{{ v is number }},{{ v is integer }},{{ v is float }},{{ v is string }},{{ v is mapping }},{{ v is iterable }},{{ v is sequence }},{{ v is callable }};{% endfor %}"),
    ("value_tests", "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 'a' is eq 'a' }} {{ 1 is equalto 2 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 2 is le 2 }} {{ 3 is gt 2 }} {{ 3 is ge 4 }} {{ 1 is in [1] }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ none is sameas none }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ nothing is not none }} {{ nope is undefined }} {{ d.items is callable }}"),
    ("defined_tests", "{{ top is defined }} {{ nope is defined }} {{ nope is not defined }} {{ nothing is defined }} {{ d.a is defined }} {{ d.zz is defined }} {{ d.a.b is defined }} {{ m[9] is defined }} {{ x['a']['z'] is defined }}"),
    # filters
    ("trim", "[{{ '  a b  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ '\u3000a\u00a0\\n' | trim }}|{{ nope | trim }}|{{ 5 | trim }}]"),
    ("length", "{{ 'héllo' | length }} {{ [1, 2] | count }} {{ {'a': 1} | length }} {{ nope | length }} {{ m | length }}"),
    ("case", "{{ 'hello wORLD-foo (bar)  x' | title }}|{{ 'hELLO world' | capitalize }}|{{ 'straße' | upper }}|{{ 'ÀÉ' | lower }}|{{ 'ǆemal' | capitalize }}|{{ 'abc' | upper | lower }}|{{ nope | upper }}"),
    ("replace", "{{ 'aaa' | replace('a', 'b') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'ab' | replace('', '-') }}|{{ 5 | replace('5', 'five') }}"),
    ("join", "{{ [1, 2, 3] | join }}|{{ ['a', 'b'] | join(', ') }}|{{ m | join('/', attribute='role') }}|{{ 'abc' | join('-') }}|{{ nope | join(',') }}|{{ [none, true] | join }}"),
    ("first_last", "{{ [1, 2] | first }} {{ [1, 2] | last }} {{ 'abc' | first }} {{ 'abc' | last }} {{ {'a': 1, 'b': 2} | first }} {{ {'a': 1, 'b': 2} | last }} [{{ [] | first }}] {{ m | last | tojson }}"),
    ("default", "{{ nope | default('d') }}|{{ nothing | default('d') }}|{{ '' | default('d', true) }}|{{ 0 | d('z', boolean=true) }}|{{ nope | d }}|{{ d.zz | default(d.a) }}"),
    ("tojson", "{{ {'b': 1, 'a': [1, 2.5, none, true, false, 'é\"\\n\\t\\\\/'], 'c': {}} | tojson }}"),
    ("tojson_indent", "{{ x | tojson(indent=2) }}\n{{ x | tojson(indent=2, sort_keys=true) }}\n{{ x | tojson(indent='\\t') }}\n{{ [] | tojson(indent=4) }}\n{{ {} | tojson(indent=4) }}\n{{ [[]] | tojson(indent=0) }}"),
    ("tojson_separators", "{{ x | tojson(separators=(',', ':')) }}|{{ x | tojson(indent=1, separators=(';', '=')) }}"),
    ("tojson_ascii", "{{ 'é😀\\x01\\x1f\\x7f' | tojson }}|{{ 'é😀\\x7f' | tojson(ensure_ascii=true) }}|{{ 'é' | tojson(true) }}"),
    ("tojson_numbers_keys", "{{ [1e100, 1e-7, 0.5, -0.0, 12345678901234, (1, 2)] | tojson }}|{{ {2: 'a', 1.5: 'b', true: 'c', none: 'd', 1: 'e'} | tojson }}"),
    ("tojson_of_messages", "{{ m | tojson }}|{{ m[1] | tojson(indent=2) }}"),
    ("string_int_float", "{{ 42 | string }}{{ [1] | string }}|{{ '42' | int + 1 }}|{{ '4.7' | int }}|{{ 'x' | int }}|{{ 'x' | int(7) }}|{{ 3.9 | int }}|{{ -3.9 | int }}|{{ '0x1A' | int(0, 16) }}|{{ ' 12 ' | int }}|{{ '1_000' | int }}|{{ true | int }}|{{ none | int }}|{{ '2.5' | float }}|{{ 'nan' | float }}|{{ '-inf' | float }}|{{ 3 | float }}|{{ 'x' | float }}|{{ '1e3' | float }}"),
    ("list_items", "{{ 'ab' | list }}|{{ {'a': 1} | items | list }}|{{ {'a': 1, 'b': 2} | list }}|{% for k, v in {'a': 1, 'b': 2} | items %}{{ k }}={{ v }};{% endfor %}|{{ nope | items | list }}|{{ nope | list }}"),
    ("select_map", "{{ m | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}|{{ m | rejectattr('role', 'eq', 'user') | list | length }}|{{ m | selectattr('x') | list }}|{{ [0, 1, 2, none] | select | list }}|{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3] | reject('gt', 1) | list }}|{{ ['a', 'B'] | map('upper') | list }}|{{ m | map(attribute='missing', default='?') | list }}|{{ nested | map(attribute='1') | list }}|{{ nested | map('join', '+') | list }}|{{ m | selectattr('n', 'in', [1, 4]) | map(attribute='role') | list }}|{{ nope | map('upper') | list }}"),
    ("sort_unique_reverse", "{{ [3, 1, 2] | sort }}|{{ ['b', 'A', 'c'] | sort }}|{{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}|{{ [3, 1, 2] | sort(reverse=true) }}|{{ m | sort(attribute='role') | map(attribute='content') | list }}|{{ m | sort(attribute='role,n', reverse=true) | map(attribute='n') | list }}|{{ ['a', 'A', 'b', 'a'] | unique | list }}|{{ ['a', 'A'] | unique(case_sensitive=true) | list }}|{{ [1, 2, 3] | reverse | list }}|{{ 'abc' | reverse }}|{{ {'a': 1, 'b': 2} | reverse | list }}"),
    ("min_max_sum", "{{ [3, 1, 2] | min }}|{{ ['b', 'A'] | max }}|{{ ['b', 'A'] | max(case_sensitive=true) }}|{{ m | max(attribute='n') | tojson }}|{{ [1, 2, 3] | sum }}|{{ m | sum(attribute='n') }}|{{ [0.5, 1] | sum(start=10) }}|[{{ [] | max }}]"),
    ("dictsort", "{{ {'b': 1, 'A': 2, 'c': 0} | dictsort }}|{{ {'b': 1, 'a': 2} | dictsort(by='value') }}|{{ {'b': 1, 'A': 2} | dictsort(true) }}|{{ {'b': 1, 'a': 2} | dictsort(reverse=true) }}"),
    ("indent", "[{{ 'a\\nb\\n\\nc' | indent }}]|[{{ 'a\\nb' | indent(2, true) }}]|[{{ 'a\\n\\nb' | indent(2, blank=true) }}]|[{{ 'a\\nb' | indent('> ') }}]|[{{ '' | indent(first=true) }}]|[{{ 'a\\n' | indent }}]"),
    ("misc_filters", "{{ 'ab' | center(7) }}|{{ 'ab' | center(6) }}|{{ 'one two, three_four' | wordcount }}|{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 3.14159 | round(2) }}|{{ 2.675 | round(2) }}|{{ 2.7 | round(0, 'floor') }}|{{ 2.1 | round(method='ceil') }}|{{ 7 | round }}|{{ -3 | abs }}|{{ -2.5 | abs }}|{{ '<a href=\"x\">&\\'' | e }}|{{ '<b>' | safe }}|{{ 'abc' | attr('upper') is callable }}|{{ d | attr('a') }}"),
    ("format_filter", "{{ '%s and %d and %.2f and %5s|%-5s|' | format('a', 3, 2.345, 'x', 'y') }}|{{ '%(n)s' | format(n=1) }}|{{ '%s' | format([1, 'a']) }}"),
    ("filter_precedence", "{{ '  a  ' | trim | upper ~ '!' }}|{{ 'x' + 'y' | upper }}|{{ m | length > 2 }}|{{ -1 | abs }}"),
    ("markup", "{{ ('<a>' | safe) + '<b>' }}|{{ '<b>' + ('<a>' | safe) }}|{{ ('<a>' | safe) ~ '<b>' }}|{{ ['x' | safe] }}|{{ ('<%s>' | safe) % '<' }}|{{ '<a>' | e }}|{{ ('a' | safe) is escaped }}|{{ 'a' is escaped }}|{{ ('<x>' | safe | upper) + '&' }}|{{ ('<x>' | safe).strip() + '&' }}|{{ ('a,b' | safe).split(',') }}|{{ ('<x>' | safe) | replace('x', 'y') + '&' }}|{{ ('<x>' | safe) | join('&') }}|{{ (('&' | safe) * 2) + '&' }}|{{ ('ab' | safe)[0] + '&' }}|{{ ('-' | safe).join(['<', '>']) }}|{{ ('x' | safe | string) + '&' }}|{{ ('x' | safe | tojson) + '&' }}|{{ (('&' | safe) | trim) + '&' }}|{{ ('a' | e | e) + '<' }}"),
    # methods
    ("str_methods", "{{ '  a  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\na\\n'.lstrip('\\n') }}|{{ 'a\\n\\n'.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ '  a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ ' a b c '.split(none, 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ ' a b c '.rsplit(none, 1) }}|{{ 'a\\nb\\r\\nc\\n'.splitlines() }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'abc'.upper() }}|{{ 'ABC'.lower() }}|{{ 'hello wORLD'.title() }}|{{ 'hELLO'.capitalize() }}"),
    ("str_methods_2", "{{ 'aXbX'.replace('X', '-') }}|{{ 'aXbX'.replace('X', '-', 1) }}|{{ 'héllo'.find('l') }}|{{ 'hello'.rfind('l') }}|{{ 'hello'.find('z') }}|{{ 'hello'.count('l') }}|{{ ', '.join(['a', 'b']) }}|{{ '{} is {}'.format('x', 1) }}|{{ '{0}{0}{name}'.format('a', name='b') }}|{{ '{{}}{!r}'.format('q') }}|{{ 'a'.center(5) }}|{{ 'a'.ljust(3) }}.|{{ 'a'.rjust(3, '*') }}|{{ '7'.zfill(3) }}|{{ '-7'.zfill(4) }}|{{ 'abc'.removeprefix('a') }}|{{ 'abc'.removesuffix('c') }}|{{ 'a=b=c'.partition('=') }}|{{ 'a=b=c'.rpartition('=') }}|{{ '123'.isdigit() }}|{{ 'ab'.isalpha() }}|{{ ' '.isspace() }}|{{ 'ab'.islower() }}|{{ 'AB'.isupper() }}|{{ 'a1'.isalnum() }}"),
    ("content_split_think", "{% set c = '<think>\\nr\\n</think>\\n\\nanswer' %}{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}"),
    ("dict_methods", "{{ d.items() | list }}|{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.get('a') }}|{{ d.get('zz') }}|{{ d.get('zz', 5) }}|{% for k, v in x.items() %}{{ k }};{% endfor %}|{{ d.copy() == d }}"),
    ("dict_attribute_vs_key", "{{ d.title }}|{{ d['items'] }}|{{ d.update is defined }}|{{ d['update'] }}|{{ d.keys is callable }}|{{ d['keys'] }}|{{ d.get is defined }}|[{{ d.pop }}]"),
    ("list_methods", "{{ [1, 2, 1].count(1) }}|{{ ['a', 'b'].index('b') }}|{{ (1, 2).index(2) }}"),
    # access
    ("subscripts", "{{ m[0].role }}|{{ m[-1]['content'] }}|[{{ m[5] }}]|{{ m[1:] | length }}|{{ m[::-1][0].role }}|{{ 'abcdef'[1:-1] }}|{{ 'abcdef'[::2] }}|{{ 'abcdef'[::-1] }}|{{ 'héllo'[1] }}|{{ 'héllo'[-1] }}|[{{ 'abc'[10:] }}]|{{ [1, 2, 3][-2:] }}|{{ nested.0 }}|{{ nested[1][0] }}|{{ m[1:3] | map(attribute='n') | list }}|{{ 'héllo'[1:3] }}|{{ [1, 2, 3][5:1:-1] }}|{{ [1, 2, 3][:-1] }}"),
    ("missing_things", "[{{ d.missing }}|{{ d['missing'] }}|{{ nope }}|{{ nothing.x }}|{{ nothing['x'] }}|{{ m[0].role.x }}|{{ 5['x'] }}]"),
    ("undefined_is_lenient", "{% for i in nope %}x{% endfor %}[{{ nope ~ 'x' }}|{{ nope | upper }}|{{ 'a' in nope }}|{{ nope | list }}|{{ nope | string }}|{{ nope | length }}|{{ nope is iterable }}]"),
    # statements
    ("loop_variables", "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('o', 'e') }}{{ loop.depth }};{% endfor %}"),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1, 2, 3] if x > 1 %}{{ x }}{{ loop.length }}{{ loop.first }}{% else %}none{% endfor %}|{% for x in [1] if x > 5 %}{% else %}filtered{% endfor %}"),
    ("unpacking", "{% for a, b in [[1, 2], (3, 4)] %}{{ a }}{{ b }}{% endfor %}|{% for k, v in {'x': 1}.items() %}{{ k }}{{ v }}{% endfor %}|{% for (a, b) in [(1, 2)] %}{{ a + b }}{% endfor %}|{% for c in 'héllo' %}{{ c }}.{% endfor %}|{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}|{% for a, b in ['xy'] %}{{ b }}{{ a }}{% endfor %}"),
    ("break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}|{% for a in [1, 2] %}{% for b in [1, 2, 3] %}{% if b == 2 %}{% break %}{% endif %}{{ a }}{{ b }}{% endfor %}{% endfor %}"),
    ("nested_loop_variable", "{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}"),
    ("scoping", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}|{% for i in [1] %}{% set y = 2 %}{% endfor %}[{{ y }}]|{% if true %}{% set z = 3 %}{% endif %}{{ z }}|{% set m = m[1:] %}{{ m | length }}"),
    ("namespace", "{% set ns = namespace(c=0, items=[]) %}{% for i in range(3) %}{% set ns.c = ns.c + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.c }}{{ ns.items }}|{% set ns2 = namespace() %}{% set ns2.a = 1 %}{{ ns2.a }}[{{ ns2.b }}]{{ ns2 }}|{% set ns3 = namespace({'a': 1}, b=2) %}{{ ns3.a }}{{ ns3.b }}{{ ns3['a'] }}|{{ namespace(a=[1]) }}"),
    ("namespace_holding_itself", "{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}|{{ ns.me.me.a }}"),
    ("set_forms", "{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = 1, 2 %}{{ t }}|{% set (p, q) = 'xy' %}{{ q }}{{ p }}"),
    ("block_set", "{% set x %}  Hello {{ 'W' }}  {% endset %}[{{ x }}]|{% set y | upper | trim %}  abc {% endset %}[{{ y }}]"),
    ("filter_block", "{% filter upper %}abc{{ 'd' }}{% endfilter %}|{% filter trim | upper %}  x  {% endfilter %}"),
    ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]"),
    ("macro", "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('A') }}|{{ greet('B', 'Hi') }}|{{ greet(greeting='Yo', name='C') }}|{{ greet() }}|{{ greet }}"),
    ("macro_recursion", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"),
    ("macro_scope", "{% set g = 'G' %}{% macro m1() %}{{ g }}{{ top }}{% set q = 1 %}{{ q }}{% endmacro %}{{ m1() }}[{{ q }}]{% set g = 'H' %}{{ m1() }}"),
    ("macro_default_uses_param", "{% macro m2(a, b=a * 2) %}{{ a }}{{ b }}{% endmacro %}{{ m2(2) }}{{ m2(2, 5) }}"),
    ("macro_whitespace", "{%- macro t(x) -%}\n  <{{ x }}>\n{%- endmacro -%}\n[{{ t(1) }}]"),
    ("generation", "{% generation %}x{% set s = 1 %}{% endgeneration %}[{{ s }}]"),
    ("globals", "{{ range(3) | list }}|{{ range(1, 10, 3) | list }}|{{ range(5, 0, -2) | list }}|{{ dict(a=1, b=2) }}|{{ strftime_now('%Y-%m-%d %H:%M:%S %a %b %d %B %A %j %y %p %I') }}|{{ raise_exception is defined }}"),
    ("special_names", "{{ loop is defined }}|{{ top }}|{% set top = 'T2' %}{{ top }}"),
    # errors
    ("raise_exception", "a{{ raise_exception('no ' ~ 'way') }}"),
    ("error_str_plus_int", "{{ 'a' + 1 }}"),
    ("error_division_by_zero", "{{ 1 / 0 }}"),
    ("error_unorderable", "{{ 'a' < 1 }}"),
    ("error_unpack", "{% set a, b = [1] %}"),
    ("error_set_attr_non_namespace", "{% set y = 1 %}{% set y.z = 2 %}"),
    ("error_iterate_int", "{% for x in 5 %}{% endfor %}"),
    ("error_unhashable", "{{ {[1]: 2} }}"),
    ("error_str_times_str", "{{ 'a' * 'b' }}"),
    ("error_undefined_attribute", "{{ nope.x }}"),
    ("error_undefined_item", "{{ nope['x'] }}"),
    ("error_undefined_plus", "{{ nope + 1 }}"),
    ("error_undefined_call", "{{ nope() }}"),
    ("error_undefined_tojson", "{{ nope | tojson }}"),
    ("error_unsafe_method", "{{ [1].append(2) }}"),
    ("error_unsafe_dict_method", "{{ d.update({}) }}"),
    ("error_range_too_big", "{{ range(100001) | length }}"),
    ("error_missing_element_then_attribute", "{{ m[10].role }}"),
    ("error_string_index_type", "{{ 'abc'.split(1) }}"),
]


def render(env, text, variables):
    try:
        return {"expected": env.from_string(text).render(**variables)}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:  # raise_exception()
            return {"refused": str(e)}
        return {"error": f"{type(e).__name__}: {e}"}
    except Exception as e:  # TypeError, ValueError, ... from Python operations
        return {"error": f"{type(e).__name__}: {e}"}


def variables(conversation, add_generation_prompt, template, kwargs):
    conv = CONVERSATIONS[conversation]
    v = {
        "messages": conv["messages"],
        "tools": conv.get("tools"),
        "documents": None,
        "add_generation_prompt": add_generation_prompt,
    }
    v.update(SPECIAL_TOKENS[template])
    v.update(kwargs)
    return v


def main():
    env = make_env()
    templates = sorted(f for f in os.listdir(DATA) if f.endswith(".jinja"))
    missing = set(templates) ^ set(SPECIAL_TOKENS)
    if missing:
        sys.exit(f"templates and SPECIAL_TOKENS disagree: {sorted(missing)}")
    cases = []
    for template in templates:
        with open(os.path.join(DATA, template), encoding="utf-8") as f:
            text = f.read()
        env.from_string(text)  # every committed template must compile
        base = BASE_KWARGS.get(template, {})
        for kwargs in [base] + [{**base, **extra} for extra in EXTRA_KWARGS.get(template, [])]:
            for conversation in CONVERSATIONS:
                for agp in [True] + ([False] if conversation in WITHOUT_GENERATION_PROMPT else []):
                    case = {"template": template, "conversation": conversation, "add_generation_prompt": agp,
                            "kwargs": kwargs}
                    case.update(render(env, text, variables(conversation, agp, template, kwargs)))
                    cases.append(case)
    snippets = []
    for name, text in SNIPPETS:
        snippet = {"name": name, "template": text}
        snippet.update(render(env, text, SNIPPET_VARS))
        snippets.append(snippet)
    out = {
        "generator": "scripts/chat_template_expectations.py",
        "jinja2": jinja2.__version__,
        "now": FIXED_NOW.isoformat(),
        "special_tokens": SPECIAL_TOKENS,
        "conversations": CONVERSATIONS,
        "cases": cases,
        "snippet_vars": SNIPPET_VARS,
        "snippets": snippets,
    }
    path = os.path.join(DATA, "expected.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    kinds = {k: sum(1 for c in cases if k in c) for k in ("expected", "refused", "error")}
    print(f"{path}: {len(cases)} cases from {len(templates)} templates ({kinds}), {len(snippets)} snippets")


if __name__ == "__main__":
    main()

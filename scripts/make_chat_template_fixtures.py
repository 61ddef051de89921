"""Make the chat-template fixtures: the real chat templates of the families longserve serves, and
what Hugging Face renders from them and from small templates that exercise one Jinja construct each.

    python scripts/make_chat_template_fixtures.py            # writes tests/fixtures/chat_templates/

Writes:
- ``<name>.jinja``: each model's template, verbatim as its Hugging Face repository ships it
  (tokenizer_config.json ``chat_template``; public data).
- ``conversations.json``: conversations (system or not, multi-turn, list-form content, tools, tool
  calls, thinking, invalid ones) rendered by ``transformers.utils.chat_template_utils.
  render_jinja_template``, the function ``apply_chat_template`` calls, so the expected text, or the
  expected exception, is Hugging Face's own.
- ``constructs.json``: one small template per construct rendered by transformers' compiled Jinja
  environment (sandboxed, trim_blocks, lstrip_blocks, loop controls, its tojson, raise_exception).
- ``fuzz_seeds/``: the seed corpus of the ``fuzz_chat_template`` libFuzzer target (every template
  above, one file each).

The C++ tests (tests/chat_template/) render the same inputs and compare byte for byte. Deterministic:
no case depends on the clock (every Llama 3.2 case passes a ``date_string``, PINNED_DATE unless the
case sets its own).
"""

from __future__ import annotations

import json
import os
import sys

import jinja2
import transformers
from transformers.utils.chat_template_utils import _compile_jinja_template, render_jinja_template

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                       "chat_templates")

# ---------------------------------------------------------------------------------------------
# The templates. Raw strings: a ``\n`` is a Jinja escape inside a template string literal, a line
# break is a line break of the template itself.
# ---------------------------------------------------------------------------------------------


# meta-llama/Meta-Llama-3-8B-Instruct (the line breaks inside the string literal are real ones).
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim"
    " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# meta-llama/Llama-3.1-8B-Instruct (also Llama-3.3-70B-Instruct): tools, builtin tools, a fixed
# default date_string.
LLAMA3_1 = r'''{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
'''

# meta-llama/Llama-3.2-3B-Instruct: the Llama-3.1 format whose default date comes from
# strftime_now().
LLAMA3_2 = r'''{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
'''

# mistralai/Mistral-7B-Instruct-v0.3: [INST] turns, the system message folded into the last user
# turn, [AVAILABLE_TOOLS] / [TOOL_CALLS] / [TOOL_RESULTS], and the alternation check.
MISTRAL_V0_3 = r'''{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
            {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
'''

# Qwen/Qwen2.5-7B-Instruct (the whole Qwen2.5 Instruct line): ChatML, a default system prompt,
# <tools> and <tool_call> blocks, consecutive tool results folded into one user turn.
QWEN2_5 = r'''{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
'''

# Qwen/Qwen3-8B (the Qwen3 hybrid-thinking line): <think> blocks kept only after the last real
# user query, reasoning_content, enable_thinking=false pre-filling an empty think block. No final
# line break in the original.
QWEN3 = r'''{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}'''

TEMPLATES = {
    "llama3": LLAMA3,
    "llama3_1": LLAMA3_1,
    "llama3_2": LLAMA3_2,
    "mistral_v0_3": MISTRAL_V0_3,
    "qwen2_5": QWEN2_5,
    "qwen3": QWEN3,
}

# Special tokens each family's tokenizer_config.json defines (apply_chat_template passes the
# tokenizer's special-tokens map to the template).
SPECIAL_TOKENS = {
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama3_1": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama3_2": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mistral_v0_3": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "qwen2_5": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "qwen3": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
}

# ---------------------------------------------------------------------------------------------
# Conversations, as OpenAI-style requests send them.
# ---------------------------------------------------------------------------------------------
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city, e.g. «Zürich» or \"São Paulo\".",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web & return <b>snippets</b>.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "max_results": {"type": "integer", "default": 5},
                "threshold": {"type": "number", "default": 0.25},
                "strict": {"type": "boolean", "default": False},
            },
            "required": ["query"],
        },
    },
}
TOOLS = [WEATHER_TOOL, SEARCH_TOOL]

SYSTEM = {"role": "system", "content": "You are a terse assistant.\nAnswer in one line."}
USER1 = {"role": "user", "content": "What is the capital of France?"}
ASSISTANT1 = {"role": "assistant", "content": "Paris."}
USER2 = {"role": "user", "content": "  And of Italy?  \n"}

WEATHER_CALL = {"type": "function", "function": {"name": "get_weather",
                                                  "arguments": {"city": "Paris", "unit": "celsius"}}}
SEARCH_CALL = {"type": "function", "function": {"name": "search",
                                                 "arguments": {"query": "Rome", "max_results": 3}}}

CONVERSATIONS = {
    "single_user": [USER1],
    "system_user": [SYSTEM, USER1],
    "multi_turn": [USER1, ASSISTANT1, USER2],
    "system_multi_turn": [SYSTEM, USER1, ASSISTANT1, USER2],
    "ends_with_assistant": [SYSTEM, USER1, ASSISTANT1],
    "unicode_and_quotes": [
        {"role": "user", "content": "Ünïcødé ✓ 中文 😀 \"quoted\" 'single' back\\slash\ttab"},
        {"role": "assistant", "content": "Ça va — «oui».\r\nLine two."},
        {"role": "user", "content": "{{ not a template }} {% neither %}"},
    ],
    "list_content": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Hello"},
                                     {"type": "text", "text": " world"}]},
    ],
    "list_content_user": [
        SYSTEM,
        {"role": "user", "content": [{"type": "text", "text": "Describe this."},
                                     {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]},
    ],
    "extra_fields": [
        {"role": "user", "content": "hi", "name": "alice"},
        {"role": "assistant", "content": "hello", "name": "bot", "refusal": None},
        {"role": "user", "content": "bye"},
    ],
    "empty_content": [{"role": "user", "content": ""}],
}

# Conversations with tool calls, per format (Mistral wants 9-character call ids).
TOOL_CONVERSATION = [
    SYSTEM,
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
    {"role": "tool", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"},
]
MISTRAL_TOOL_CONVERSATION = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None,
     "tool_calls": [dict(WEATHER_CALL, id="aB3dE6gH9")]},
    {"role": "tool", "tool_call_id": "aB3dE6gH9", "content": "{\"temperature\": 21}"},
    {"role": "assistant", "content": "It is 21 °C."},
    {"role": "user", "content": "Thanks"},
]
QWEN_MULTI_TOOL = [
    {"role": "user", "content": "Weather in Paris, and search Rome."},
    {"role": "assistant", "content": "Let me check.", "tool_calls": [WEATHER_CALL, SEARCH_CALL]},
    {"role": "tool", "content": "{\"temperature\": 21}"},
    {"role": "tool", "content": "Rome is the capital of Italy."},
    {"role": "assistant", "content": "21 °C in Paris; Rome is Italy's capital."},
]
QWEN3_THINKING = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4"},
    {"role": "user", "content": "Times 3?"},
    {"role": "assistant", "content": "<think>\n4*3\n</think>\n\n12"},
]
QWEN3_REASONING_FIELD = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!", "reasoning_content": "\nGreet back.\n"},
    {"role": "user", "content": "Again"},
    {"role": "assistant", "content": "Hello again!", "reasoning_content": "Greet again."},
]
QWEN3_AGENT = [
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "<think>\nNeed a tool.\n</think>\n\n",
     "tool_calls": [{"type": "function", "function": {
         "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "content": "sunny"},
    {"role": "assistant", "content": "<think>\nGot it.\n</think>\n\nSunny."},
]

# Invalid conversations: the template raises (raise_exception, or a Python error).
INVALID = {
    "mistral_v0_3": {
        "not_alternating": [USER1, {"role": "user", "content": "again"}],
        "assistant_first": [SYSTEM, ASSISTANT1],
        "bad_tool_call_id": [USER1, {"role": "assistant", "content": None,
                                     "tool_calls": [dict(WEATHER_CALL, id="short")]}],
        "unknown_role": [USER1, {"role": "developer", "content": "x"}],
    },
    "llama3_1": {
        "two_tool_calls": [USER1, {"role": "assistant", "content": None,
                                   "tool_calls": [WEATHER_CALL, SEARCH_CALL]}],
    },
    "qwen2_5": {"empty_messages": []},
}


# Llama 3.2's "Today Date" for the cases that give no date_string of their own (the template
# would otherwise call strftime_now(), and the fixtures would expire at midnight).
PINNED_DATE = "21 Nov 2026"


def conversation_cases():
    """(template, case name, messages, extra context) for every conversation a template takes."""
    cases = []
    for name in TEMPLATES:
        for conv_name, conv in CONVERSATIONS.items():
            cases.append((name, conv_name, conv, {}))
    for name in ("llama3_1", "llama3_2", "qwen2_5", "qwen3"):
        cases.append((name, "tools_declared", [SYSTEM, USER1], {"tools": TOOLS}))
        cases.append((name, "tool_call_and_result", TOOL_CONVERSATION, {"tools": TOOLS}))
    for name in ("llama3_1", "llama3_2"):
        cases.append((name, "tools_in_system", [SYSTEM, USER1],
                      {"tools": [WEATHER_TOOL], "tools_in_user_message": False}))
        cases.append((name, "no_user_for_tools", [SYSTEM], {"tools": TOOLS}))
        cases.append((name, "fixed_date", [USER1], {"date_string": "05 Mar 2025"}))
    cases.append(("llama3_1", "builtin_tools", [
        USER1, {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "brave_search",
                                              "arguments": {"query": "Paris"}}}]},
        {"role": "ipython", "content": {"results": ["Paris is in France"]}},
    ], {"builtin_tools": ["brave_search", "code_interpreter"]}))
    cases.append(("mistral_v0_3", "tools_and_calls", MISTRAL_TOOL_CONVERSATION, {"tools": TOOLS}))
    cases.append(("mistral_v0_3", "system_and_tools", [SYSTEM, USER1], {"tools": [WEATHER_TOOL]}))
    for name in ("qwen2_5", "qwen3"):
        cases.append((name, "parallel_tool_calls", QWEN_MULTI_TOOL, {"tools": TOOLS}))
    for thinking in (None, True, False):
        extra = {} if thinking is None else {"enable_thinking": thinking}
        suffix = {None: "", True: "_thinking_on", False: "_thinking_off"}[thinking]
        cases.append(("qwen3", "think_history" + suffix, QWEN3_THINKING, extra))
        cases.append(("qwen3", "reasoning_field" + suffix, QWEN3_REASONING_FIELD, extra))
        cases.append(("qwen3", "agent" + suffix, QWEN3_AGENT, dict(extra, tools=TOOLS)))
        cases.append(("qwen3", "single_user" + suffix, [USER1], extra))
    for name, convs in INVALID.items():
        for conv_name, conv in convs.items():
            cases.append((name, conv_name, conv, {}))
    cases.append(("llama3", "empty_messages", [], {}))
    return cases


def describe_error(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "message": str(exc),
            "lineno": getattr(exc, "lineno", None)}


def render_conversations():
    out = []
    for name, conv_name, messages, extra in conversation_cases():
        for add_generation_prompt in (False, True):
            context = dict(SPECIAL_TOKENS[name], **extra)
            if name == "llama3_2":  # its default date comes from strftime_now(): pin it
                context.setdefault("date_string", PINNED_DATE)
            kwargs = dict(context)
            tools = kwargs.pop("tools", None)
            case = {"template": name, "name": conv_name, "messages": messages,
                    "add_generation_prompt": add_generation_prompt, "extra_context": context}
            try:
                rendered, _ = render_jinja_template(
                    conversations=[messages], tools=tools, chat_template=TEMPLATES[name],
                    add_generation_prompt=add_generation_prompt, **kwargs)
                case["expected"] = rendered[0]
            except Exception as exc:  # the template raised: record what HF reports
                case["error"] = describe_error(exc)
            out.append(case)
    return out


# ---------------------------------------------------------------------------------------------
# One small template per construct: (name, template, context).
# ---------------------------------------------------------------------------------------------
MSGS = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"}, {"role": "user", "content": "bye"}]
CONSTRUCTS = [
    # Text, comments, whitespace control.
    ("text", "Hello, world!", {}),
    ("text_unicode", "Grüße, 世界 😀", {}),
    ("comment", "a{# a comment {{ x }} #}b", {}),
    ("comment_multiline", "a\n{# line one\nline two #}\nb", {}),
    ("trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter", {}),
    ("trim_blocks_only_one_newline", "{% if true %}\n\nx{% endif %}", {}),
    ("no_trim_after_output", "{{ 'a' }}\nb", {}),
    ("lstrip_blocks", "line\n    {% if true %}\n    body\n    {% endif %}\nend", {}),
    ("lstrip_blocks_tabs", "\t \t{% if true %}x{% endif %}", {}),
    ("lstrip_not_after_text", "text {% if true %}x{% endif %}", {}),
    ("lstrip_not_for_output", "    {{ 'x' }}", {}),
    ("lstrip_comment", "a\n   {# c #}\nb", {}),
    ("minus_left", "a   \n  {%- if true %}b{% endif %}", {}),
    ("minus_right", "{% if true -%}   \n\n  b{% endif %}", {}),
    ("minus_output", "a  {{- 'b' -}}  \n c", {}),
    ("minus_comment", "a  {#- c -#}  b", {}),
    ("plus_disables_lstrip", "x\n    {%+ if true %}y{% endif %}", {}),
    ("plus_disables_trim", "{% if true +%}\ny{% endif %}", {}),
    ("trailing_newline_dropped", "a\n", {}),
    ("two_trailing_newlines", "a\n\n", {}),
    ("crlf_normalized", "a\r\nb\rc", {}),
    ("raw_block", "{% raw %}{{ not evaluated }}{% endraw %}", {}),
    ("raw_block_trim", "{%- raw -%}  {{ x }}  {%- endraw -%}  !", {}),
    ("nested_braces", "{{ {'a': {'b': 1}} }}", {}),
    ("dict_in_block", "{% set d = {'k': {'v': 2}} %}{{ d.k.v }}", {}),
    ("whitespace_in_tags", "{%if true%}{{1}}{%endif%}{{   2   }}", {}),
    ("multiline_tag", "{% if\n  true\n%}x{% endif\n%}", {}),
    # Literals.
    ("string_escapes", r"""{{ 'a\nb\tc\\d\'e\"f' }}|{{ "x\x41\u00e9\U0001F600" }}|{{ '\q' }}""", {}),
    ("string_concat_adjacent", "{{ 'a' 'b' \"c\" }}", {}),
    ("integers", "{{ 42 }} {{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ -7 }}", {}),
    ("floats", "{{ 1.5 }} {{ 1e3 }} {{ 2.5e-3 }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e100 }} {{ 3.0e16 }}"
     " {{ 123456789012345678.0 }} {{ 0.0001 }} {{ 0.00001 }}", {}),
    ("booleans_none", "{{ true }} {{ True }} {{ false }} {{ False }} {{ none }} {{ None }}", {}),
    ("list_literal", "{{ [1, 'two', 3.0, none, true, [4], {'k': 'v'}] }}", {}),
    ("list_trailing_comma", "{{ [1, 2,] }}", {}),
    ("dict_literal", "{{ {'b': 1, 'a': [2], 'c': {'d': none}} }}", {}),
    ("tuple_literal", "{{ (1, 'a') }} {{ (1,) }} {{ () }}", {}),
    ("repr_strings", "{{ ['plain', \"it's\", 'say \"hi\"', 'both \\' and \"', 'nl\\n', 'tab\\t', "
     "'back\\\\slash', 'é😀', '\\x00\\x7f'] }}", {}),
    ("repr_nested_context", "{{ data }}", {"data": {"a": [1, 2.5, None, True], "b": "x'y",
                                                 "c": {"n": -0.0}}}),
    # Operators.
    ("arithmetic", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 8 / 2 }} {{ 7 // 2 }}"
     " {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}"
     " {{ 7.5 // 2 }} {{ 7.5 % 2 }} {{ -7.5 % 2 }} {{ 1 + 1.5 }} {{ true + 1 }}", {}),
    ("precedence", "{{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }} {{ 2 * 3 ** 2 }} {{ -2 ** 2 }}"
     " {{ 2 ** 3 ** 2 }} {{ 10 - 2 - 3 }} {{ 100 / 10 / 5 }}", {}),
    ("string_ops", "{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ 'n=' ~ 5 ~ none ~ true }}"
     " {{ [1] + [2, 3] }} {{ [0] * 3 }} {{ (1,) + (2,) }}", {}),
    ("concat_undefined", "[{{ 'a' ~ missing ~ 'b' }}]", {}),
    ("comparisons", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 3 >= 4 }} {{ 1 == 1.0 }}"
     " {{ 1 != 2 }} {{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ [1, 2] < [1, 3] }} {{ [1] == [1] }}"
     " {{ (1, 2) == [1, 2] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ none == none }}"
     " {{ true == 1 }} {{ 'é' > 'z' }}", {}),
    ("chained_comparison", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1 == 1 }}", {}),
    ("logic_values", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ none or [] }}"
     " {{ not 0 }} {{ not 'a' }} {{ not not [] }} {{ true and not false }}", {}),
    ("logic_short_circuit", "{{ false and missing.attr }}{{ true or missing.attr }}", {}),
    ("in_operator", "{{ 'b' in 'abc' }} {{ 'x' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in d }}"
     " {{ 'v' in d }} {{ 'q' not in d }} {{ 1 in (1, 2) }} {{ '' in 'a' }} {{ 'a' in missing }}",
     {"d": {"k": "v"}}),
    ("ternary", "{{ 'yes' if flag else 'no' }} {{ 'yes' if not flag else 'no' }} [{{ 'a' if false }}]"
     " {{ 1 if false else 2 if false else 3 }}", {"flag": True}),
    ("unary", "{{ -x }} {{ +x }} {{ - -x }} {{ -1.5 }} {{ -x|abs }}", {"x": 4}),
    ("tuple_output", "{{ 1, 'a' }}", {}),
    # Variables, attributes, items, slices.
    ("attribute_and_item", "{{ m.role }} {{ m['content'] }} {{ m.nested.deep }} {{ m['nested']['deep'] }}",
     {"m": {"role": "user", "content": "hi", "nested": {"deep": 7}}}),
    ("missing_key_is_undefined", "[{{ m.nope }}][{{ m['nope'] }}][{{ m.nope is defined }}]"
     "[{{ m.nope is undefined }}][{{ lst[10] }}][{{ 'x'.nope }}][{{ none.x }}]",
     {"m": {"a": 1}, "lst": [1]}),
    ("indexing", "{{ l[0] }} {{ l[-1] }} {{ l[1] }} {{ s[0] }} {{ s[-1] }} {{ t[1] }} {{ l.0 }}",
     {"l": ["a", "b", "c"], "s": "héllo", "t": [1, 2]}),
    ("slicing", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ l[1:3] }} {{ l[-2:] }}"
     " {{ l[5:] }} {{ l[:100] }} {{ l[3:1] }} {{ l[3:0:-1] }} {{ l[-100:2] }}",
     {"l": [0, 1, 2, 3, 4]}),
    ("string_slicing", "{{ s[::-1] }} {{ s[1:4] }} {{ s[-3:] }} {{ s[::2] }}", {"s": "añb😀cd"}),
    ("messages_slice", "{% for m in messages[1:] %}{{ m.role }},{% endfor %}"
     "{% for m in messages[::-1] %}{{ m.content }}{% endfor %}", {"messages": MSGS}),
    # Statements.
    ("if_elif_else", "{% for n in [1, 2, 3, 0] %}{% if n == 1 %}one{% elif n == 2 %}two"
     "{% elif n %}many{% else %}zero{% endif %};{% endfor %}", {}),
    ("if_undefined", "{% if missing %}a{% else %}b{% endif %}{% if missing is defined %}c{% endif %}", {}),
    ("for_loop_vars", "{% for x in items %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/"
     "{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}",
     {"items": ["a", "b", "c"]}),
    ("for_prev_next_cycle", "{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}"
     "{{ loop.cycle('o', 'e') }};{% endfor %}", {}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] %}{{ x }}"
     "{% else %}empty{% endfor %}", {}),
    ("for_over_dict", "{% for k in d %}{{ k }};{% endfor %}{% for k, v in d.items() %}{{ k }}={{ v }};"
     "{% endfor %}{% for k, v in d | items %}{{ k }}:{{ v }};{% endfor %}",
     {"d": {"z": 1, "a": 2, "m": 3}}),
    ("for_over_string", "{% for c in 'añ😀' %}[{{ c }}]{% endfor %}", {}),
    ("for_unpack_lists", "{% for a, b in [[1, 2], (3, 4)] %}{{ a }}{{ b }};{% endfor %}", {}),
    ("for_filter", "{% for x in [1, 2, 3, 4, 5, 6] if x is even %}{{ loop.index }}:{{ x }}:"
     "{{ loop.length }}:{{ loop.last }};{% endfor %}", {}),
    ("for_filter_else", "{% for x in [1, 3] if x > 5 %}{{ x }}{% else %}none{% endfor %}", {}),
    ("break_continue", "{% for n in range(10) %}{% if n is odd %}{% continue %}{% endif %}"
     "{% if n > 6 %}{% break %}{% endif %}{{ n }}{% endfor %}", {}),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}"
     "{% endfor %}/{{ loop.index }};{% endfor %}", {}),
    ("for_undefined_iterable", "[{% for x in missing %}{{ x }}{% endfor %}]", {}),
    ("set_scoping", "{% set a = 1 %}{% for x in [1, 2] %}{{ a }}{% set a = x * 10 %}{{ a }};"
     "{% endfor %}{{ a }}{% if true %}{% set b = 5 %}{% endif %}{{ b }}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 3, 4 %}{{ c }}", {}),
    ("set_block", "{% set body %}Hello {{ name }}!{% endset %}[{{ body }}]", {"name": "Bob"}),
    ("set_block_filter", "{% set body | upper | trim %}  hello  {% endset %}[{{ body }}]", {}),
    ("set_overrides_context", "{% set messages = messages[1:] %}{{ messages | length }}",
     {"messages": MSGS}),
    ("namespace", "{% set ns = namespace(total=0, seen=false, name='x') %}{% for x in [1, 2, 3] %}"
     "{% set ns.total = ns.total + x %}{% if x == 2 %}{% set ns.seen = true %}{% endif %}"
     "{% endfor %}{{ ns.total }} {{ ns.seen }} {{ ns.name }} {{ ns.nope is defined }}", {}),
    ("namespace_empty_then_set", "{% set ns = namespace() %}{% set ns.i = 0 %}"
     "{% for m in messages %}{% set ns.i = ns.i + 1 %}{% endfor %}{{ ns.i }}", {"messages": MSGS}),
    ("namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", {}),
    ("macro", "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}"
     "{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }}"
     " {{ greet(punct='?', name='Cy') }}", {}),
    ("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}"
     "{{ m(1, 2, 3, k='v') }}", {}),
    ("macro_sees_globals", "{% set g = 'G' %}{% macro m() %}{{ g }}{{ later }}{% endmacro %}"
     "{% set later = 'L' %}{{ m() }}", {}),
    ("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1) | int) }}"
     "{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("macro_whitespace", "{% macro item(x) %}\n  - {{ x }}\n{% endmacro %}\n"
     "{% for x in ['a', 'b'] %}{{ item(x) }}{% endfor %}", {}),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
     "{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}", {}),
    ("call_block_args", "{% macro each(items) %}{% for i in items %}{{ caller(i, loop.index) }}"
     "{% endfor %}{% endmacro %}{% call(item, n) each(['x', 'y']) %}{{ n }}={{ item }};"
     "{% endcall %}", {}),
    ("filter_block", "{% filter upper %}hello {{ 'world' }}{% endfilter %}", {}),
    ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
    ("generation_block", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}"
     "{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}|{% endfor %}",
     {"messages": MSGS}),
    ("print_statement", "{% print 'a', 1 %}", {}),
    # Filters.
    ("filter_length_count", "{{ 'añ😀' | length }} {{ [1, 2] | length }} {{ {'a': 1} | length }}"
     " {{ missing | length }} {{ [1, 2, 3] | count }}", {}),
    ("filter_trim", "[{{ '  a b \n\t' | trim }}][{{ 'xxaxx' | trim('x') }}][{{ missing | trim }}]"
     "[{{ '\u00a0 nbsp \u3000' | trim }}]", {}),
    ("filter_upper_lower", "{{ 'aÉb ß' | upper }} {{ 'AÉB' | lower }} {{ 'hello' | upper }}", {}),
    ("filter_capitalize_title", "{{ 'hELLO wORLD' | capitalize }}|{{ 'hello wORLD-foo bar(baz) '"
     " | title }}|{{ \"they're bill's\" | title }}", {}),
    ("filter_replace", "{{ 'a-b-c' | replace('-', '+') }} {{ 'aaa' | replace('a', 'b', 2) }}"
     " {{ 'abc' | replace('', '.') }}", {}),
    ("filter_join", "{{ ['a', 'b', 'c'] | join }} {{ ['a', 'b'] | join(', ') }} {{ [1, 2.5, none] | join('-') }}"
     " {{ users | join(', ', attribute='name') }}", {"users": [{"name": "x"}, {"name": "y"}]}),
    ("filter_default", "[{{ missing | default('dflt') }}][{{ none | default('dflt') }}]"
     "[{{ '' | default('dflt') }}][{{ '' | default('dflt', true) }}][{{ missing | d('d') }}]"
     "[{{ 0 | default('x', boolean=true) }}][{{ 'set' | default('dflt') }}]", {}),
    ("filter_first_last", "{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }}"
     " {{ 'abc' | last }} [{{ [] | first }}]", {}),
    ("filter_reverse", "{{ [1, 2, 3] | reverse | list }} {{ 'abc😀' | reverse }}", {}),
    ("filter_list_string", "{{ 'ab' | list }} {{ (1, 2) | list }} {{ {'a': 1, 'b': 2} | list }}"
     " {{ 5 | string }} {{ [1, 'a'] | string }} {{ none | string }} {{ 1.0 | string }}", {}),
    ("filter_int_float", "{{ '42' | int }} {{ '4.7' | int }} {{ 3.9 | int }} {{ 'x' | int }}"
     " {{ 'x' | int(7) }} {{ '0x1A' | int(0, 16) }} {{ true | int }} {{ '2.5' | float }}"
     " {{ 3 | float }} {{ 'x' | float }} {{ '  12 ' | int }} {{ '1e3' | float }}", {}),
    ("filter_abs_round", "{{ -3 | abs }} {{ -2.5 | abs }} {{ 2.5 | round }} {{ 3.14159 | round(2) }}"
     " {{ 2.7 | round(0, 'floor') }} {{ 2.1 | round(0, 'ceil') }} {{ 7 | round }}", {}),
    ("filter_items", "{% for k, v in {'b': 1, 'a': 2} | items %}{{ k }}{{ v }}{% endfor %}"
     "[{% for k, v in missing | items %}x{% endfor %}]", {}),
    ("filter_selectattr", "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content')"
     " | join(',') }} {{ msgs | selectattr('on') | list | length }}"
     " {{ msgs | selectattr('role', 'eq', 'system') | list | length }}"
     " {{ msgs | selectattr('role', '==', 'assistant') | first }}",
     {"msgs": [{"role": "user", "content": "a", "on": True}, {"role": "system", "content": "b"},
               {"role": "user", "content": "c", "on": 0}, {"role": "assistant", "content": "d"}]}),
    ("filter_rejectattr", "{{ msgs | rejectattr('role', 'equalto', 'user') | map(attribute='content')"
     " | list }} {{ msgs | rejectattr('on') | list | length }}",
     {"msgs": [{"role": "user", "content": "a", "on": True}, {"role": "system", "content": "b"}]}),
    ("filter_select_reject", "{{ [1, 2, 3, 4, 0] | select('odd') | list }} {{ [1, 2, 3] | reject('odd')"
     " | list }} {{ [0, 1, '', 'a', none] | select | list }} {{ ['a', 'code', 'b'] | reject('equalto',"
     " 'code') | join(',') }} {{ [1, 5, 9] | select('gt', 4) | list }}", {}),
    ("filter_map", "{{ users | map(attribute='name') | join(',') }} {{ users | map(attribute='age',"
     " default=0) | list }} {{ ['a', 'b'] | map('upper') | join }} {{ [' x ', 'y '] | map('trim')"
     " | list }} {{ users | map(attribute='info.city') | list }}",
     {"users": [{"name": "ann", "age": 3, "info": {"city": "P"}}, {"name": "bob", "info": {}}]}),
    ("filter_unique", "{{ [1, 2, 1, 3, 2] | unique | list }} {{ ['a', 'A', 'b'] | unique | list }}"
     " {{ ['a', 'A', 'b'] | unique(case_sensitive=true) | list }}", {}),
    ("filter_sort", "{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ [3, 1, 2] | sort(reverse=true) }}"
     " {{ users | sort(attribute='age') | map(attribute='name') | join }}",
     {"users": [{"name": "a", "age": 30}, {"name": "b", "age": 10}]}),
    ("filter_dictsort", "{{ {'b': 1, 'A': 2, 'c': 0} | dictsort }} {{ {'b': 1, 'a': 2} | dictsort(by='value') }}", {}),
    ("filter_min_max_sum", "{{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ [1, 2, 3.5] | sum }}"
     " {{ users | sum(attribute='n') }} {{ ['b', 'A'] | min }}", {"users": [{"n": 1}, {"n": 2}]}),
    ("filter_indent", "{{ 'a\nb\n\nc' | indent }}|{{ 'a\nb' | indent(2, true) }}|"
     "{{ 'a\n\nb' | indent(2, blank=true) }}|{{ 'x\ny' | indent('> ') }}", {}),
    ("filter_center_wordcount", "[{{ 'ab' | center(6) }}] {{ 'one two  three' | wordcount }}", {}),
    ("filter_safe_escape", "{{ '<b>&\"' | safe }} {{ '<b>&\\'\"' | e }} {{ '<x>' | escape }}", {}),
    ("filter_attr", "{{ d | attr('k') }}", {"d": {"k": "v"}}),
    ("filter_chained", "{{ '  Hello World  ' | trim | lower | replace('world', 'there') | upper }}", {}),
    ("filter_batch_slice", "{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ [1, 2, 3, 4, 5] | slice(2) | list }}", {}),
    ("filter_tojson", "{{ data | tojson }}", {"data": {"b": [1, 2.5, "é<>&'", None, True, False],
                                                     "a": {"nested": "x\ny\t\"q\" \\ \u0001"},
                                                     "float": 1e-7, "big": 12345678901234567,
                                                     "empty_list": [], "empty_obj": {}}}),
    ("filter_tojson_indent", "{{ data | tojson(indent=2) }}|{{ data | tojson(indent=0) }}|"
     "{{ [] | tojson(indent=4) }}", {"data": {"b": [1, {"c": []}], "a": {}}}),
    ("filter_tojson_options", "{{ data | tojson(separators=(',', ':')) }} {{ data | tojson(sort_keys=true) }}"
     " {{ 'é' | tojson(ensure_ascii=true) }} {{ data | tojson(indent='\t') }}",
     {"data": {"z": 1, "a": [1, 2]}}),
    ("filter_tojson_scalars", "{{ 'x' | tojson }} {{ 1 | tojson }} {{ 1.5 | tojson }} {{ none | tojson }}"
     " {{ true | tojson }} {{ (1, 'a') | tojson }} {{ 2.0 | tojson }} {{ 1e20 | tojson }}", {}),
    # Tests.
    ("tests_defined", "{{ x is defined }} {{ missing is defined }} {{ missing is undefined }}"
     " {{ x is not defined }} {{ n is defined }}", {"x": 1, "n": None}),
    ("tests_types", "{{ n is none }} {{ x is none }} {{ s is string }} {{ x is string }}"
     " {{ d is mapping }} {{ l is mapping }} {{ l is iterable }} {{ s is iterable }}"
     " {{ x is iterable }} {{ l is sequence }} {{ d is sequence }} {{ x is number }}"
     " {{ f is number }} {{ x is integer }} {{ f is integer }} {{ f is float }} {{ b is boolean }}"
     " {{ x is boolean }} {{ b is true }} {{ b is false }} {{ x is true }} {{ b is number }}"
     " {{ missing is iterable }} {{ missing is string }} {{ n is mapping }}",
     {"n": None, "x": 1, "s": "s", "d": {}, "l": [], "f": 1.5, "b": True}),
    ("tests_compare", "{{ 3 is odd }} {{ 3 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is equalto 'a' }}"
     " {{ 'a' is eq 'b' }} {{ 2 is in [1, 2] }} {{ 3 is gt 2 }} {{ 3 is lt 2 }} {{ 3 is ge 3 }}"
     " {{ 3 is le 2 }} {{ 3 is ne 3 }} {{ 'x' is sameas 'x' }} {{ none is sameas none }}"
     " {{ 'ab' is lower }} {{ 'AB' is upper }} {{ x is callable }} {{ range is callable }}",
     {"x": 1}),
    ("test_is_not_chain", "{{ x is not none and x is not string }} {{ not x is none }}", {"x": 3}),
    ("tests_in_selectattr", "{{ msgs | selectattr('content', 'string') | list | length }}"
     " {{ msgs | selectattr('content', 'none') | list | length }}"
     " {{ msgs | selectattr('tool_calls', 'defined') | list | length }}",
     {"msgs": [{"content": "a"}, {"content": None, "tool_calls": []}, {"content": "b"}]}),
    # Methods.
    ("string_methods", "[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ 'xxaxx'.strip('x') }}]"
     "[{{ s.upper() }}][{{ s.lower() }}][{{ 'hello wORLD 3rd'.title() }}][{{ 'a b'.capitalize() }}]",
     {"s": "  Hi There \n"}),
    ("string_split", "{{ 'a,b,,c'.split(',') }} {{ '  a  b c '.split() }} {{ 'a,b,c'.split(',', 1) }}"
     " {{ 'abc'.split('x') }} {{ 'a<think>b</think>c'.split('</think>')[-1] }} {{ ''.split() }}"
     " {{ 'a b c'.rsplit(' ', 1) }}", {}),
    ("string_startswith", "{{ s.startswith('<tool') }} {{ s.endswith('>') }} {{ s.startswith(('x', '<')) }}"
     " {{ s.endswith('nope') }}", {"s": "<tool_response>x</tool_response>"}),
    ("string_replace_find", "{{ 'a-b-c'.replace('-', '') }} {{ 'aaa'.replace('a', 'b', 1) }}"
     " {{ 'hello'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }}"
     " {{ 'héllo'.index('l') }} {{ ','.join(['a', 'b']) }}", {}),
    ("string_predicates", "{{ '123'.isdigit() }} {{ 'a1'.isdigit() }} {{ 'abc'.isalpha() }}"
     " {{ '  '.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ 'a1'.isalnum() }}", {}),
    ("string_strip_chars", "[{{ '\n\nx\n'.lstrip('\n') }}][{{ '\n\nx\n'.rstrip('\n') }}]"
     "[{{ 'abcxcba'.strip('ab') }}]", {}),
    ("dict_methods", "{% for k in d.keys() %}{{ k }}{% endfor %} {% for v in d.values() %}{{ v }}{% endfor %}"
     " {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.items() | list }}",
     {"d": {"a": 1, "b": 2}}),
    # Globals.
    ("range", "{{ range(3) | list }} {{ range(1, 4) | list }} {{ range(10, 0, -3) | list }}"
     " {{ range(0) | list }}", {}),
    ("dict_global", "{{ dict(a=1, b='x') }}", {}),
    ("globals_defined", "{{ raise_exception is defined }} {{ strftime_now is defined }}"
     " {{ namespace is defined }} {{ range is defined }}", {}),
    ("raise_exception", "{% if x > 1 %}{{ raise_exception('x is too big: ' ~ x) }}{% endif %}ok",
     {"x": 5}),
    ("raise_exception_not_reached", "{% if x > 10 %}{{ raise_exception('nope') }}{% endif %}ok",
     {"x": 5}),
    # jinja2 runtime details that real templates can run into.
    ("generator_truthiness", "{% if msgs | selectattr('role', 'equalto', 'nobody') %}T{% else %}F{% endif %}"
     "{% if msgs | selectattr('role', 'equalto', 'nobody') | list %}T{% else %}F{% endif %}"
     "{{ msgs | map(attribute='role') is iterable }}{{ msgs | select is sequence }}",
     {"msgs": [{"role": "user"}]}),
    ("lazy_filters_defer_errors", "{{ 5 | select('odd') is iterable }}{{ 0 | map('upper') | list }}"
     "{{ 'ab' | reject('odd') is defined }}", {}),
    ("markup_repr_and_add", "{{ ['<b>' | safe, 'x' | e] }}|{{ ('<' | safe) + '<b>' }}|{{ '<i>' + ('&' | e) }}"
     "|{{ ('a' | safe) ~ '<' }}|{{ '<' | e | e }}|{{ '<' | forceescape | forceescape }}"
     "|{{ ('x' | safe) is escaped }}{{ 'x' is escaped }}", {}),
    ("undefined_tests", "{{ missing is sequence }} {{ missing is callable }} {{ missing is iterable }}"
     " {{ missing is mapping }} {{ missing is string }} {{ missing is number }}", {}),
    ("scope_assigned_later_is_undefined", "{% for m in [1] %}[{{ s }}]{% endfor %}{% set s = 'x' %}"
     "{% macro m() %}[{{ s }}]{% endmacro %}{{ m() }}", {"s": "ctx"}),
    ("scope_loaded_first_resolves", "[{{ s }}]{% set s = 'x' %}[{{ s }}]{% for i in [1] %}[{{ s }}]{% endfor %}",
     {"s": "ctx"}),
    ("scope_set_in_branch_resolves", "{% if false %}{% set s = 'x' %}{% endif %}{% for i in [1] %}[{{ s }}]"
     "{% endfor %}[{{ s }}]", {"s": "ctx"}),
    ("scope_loop_local_before_set", "{% set a = 1 %}{% for x in [2, 3] %}{{ a }}{% set a = x %}{{ a }};"
     "{% endfor %}{{ a }}", {}),
    ("scope_blocks_do_not_leak", "{% set blk %}{% set x = 1 %}{% endset %}{% filter upper %}{% set y = 2 %}"
     "{% endfilter %}{% with %}{% set z = 3 %}{% endwith %}[{{ x }}{{ y }}{{ z }}]", {}),
    ("string_format_operator", "{{ '%s and %s' % ('a', 1) }}|{{ '%d%%' % 5 }}|{{ '%(k)s' % {'k': 'v'} }}"
     "|{{ 'plain' % missing }}|{{ '%.2f' % 3.14159 }}|{{ '%r' % 'q' }}", {}),
    ("round_floor_ceil_signs", "{{ -0.25 | round(0, 'floor') }} {{ -0.0 | round(1, 'ceil') }} {{ 0.3 | round(0, 'ceil') }}"
     " {{ 2.675 | round(2) }} {{ 0.125 | round(2) }} {{ -2.5 | round }}", {}),
    ("truncate_and_indent", "{{ 'hello world foo bar' | truncate(9) }}|{{ 'hello world foo bar' | truncate(9, true) }}"
     "|{{ [1, 2] | truncate(3) }}|{{ 'short' | truncate(9) }}|{{ 'a\nb' | indent(first=true) }}", {}),
    ("negative_literal_power", "{{ -2 ** 2 }} {{ -2 ** n }} {{ (-2) ** n }} {{ -x ** 2 }}", {"n": 2, "x": 3}),
    ("float_repr_corner_cases", "{{ [0.1, 1e16, 1e15, 123456789.123, 5e-324, 1.7976931348623157e308, 2.5e-5,"
     " 100.0, 1e-4, 12345678901234567890.0, 0.30000000000000004] }}", {}),
    ("unicode_case_mapping", "{{ 'straße' | upper }} {{ 'ﬁne' | upper }} {{ 'İi' | lower }} {{ 'ǅungla' | lower }}"
     " {{ 'élan vital' | title }} {{ 'σς' | upper }}", {}),
    ("dict_order_and_repr", "{{ d }} {{ d | tojson }} {{ d.keys() | list }} {{ d | dictsort(reverse=true) }}",
     {"d": {"zeta": 1, "alpha": {"b": [1, {"c": None}]}, "mid": "x\"y'z"}}),
    # Runtime errors (HF raises; the engine must report an error, not crash).
    ("error_attr_of_undefined", "{{ missing.attr }}", {}),
    ("error_item_of_undefined", "{{ missing[0] }}", {}),
    ("error_attr_of_missing_key", "{{ d.x.y }}", {"d": {}}),
    ("error_missing_element", "{{ l[5].x }}", {"l": [1]}),
    ("error_add_types", "{{ 1 + 'a' }}", {}),
    ("error_concat_list", "{{ 'a' + ['b'] }}", {}),
    ("error_undefined_arith", "{{ missing + 1 }}", {}),
    ("error_div_zero", "{{ 1 / 0 }}", {}),
    ("error_mod_zero", "{{ 1 % 0 }}", {}),
    ("error_call_undefined", "{{ nofunc() }}", {}),
    ("error_unknown_method", "{{ 'x'.nomethod() }}", {}),
    ("error_len_none", "{{ none | length }}", {}),
    ("error_iterate_int", "{% for x in 5 %}{% endfor %}", {}),
    ("error_tojson_undefined", "{{ missing | tojson }}", {}),
    ("error_compare_types", "{{ 1 < 'a' }}", {}),
    ("error_slice_step_zero", "{{ [1, 2][::0] }}", {}),
    ("error_set_attr_not_namespace", "{% set d = {} %}{% set d.a = 1 %}", {}),
    ("error_range_too_big", "{{ range(1000000) | length }}", {}),
    ("error_unique_unhashable", "{{ [[1], [1]] | unique | list }}", {}),
    ("error_generator_has_no_len", "{{ [1, 2] | select | length }}", {}),
    ("error_indent_non_string", "{{ 5 | indent }}", {}),
    ("error_unknown_filter_at_runtime", "{% for x in [1] %}{{ x | nosuchfilter }}{% endfor %}", {}),
    # Syntax errors (HF raises TemplateSyntaxError with a line number).
    ("syntax_unclosed_block", "line1\n{% if true %}\nno end", {}),
    ("syntax_unknown_tag", "a\nb\n{% frobnicate %}", {}),
    ("syntax_unexpected_end", "{% for x in y %}\n{% endif %}", {}),
    ("syntax_stray_endfor", "x\n{% endfor %}", {}),
    ("syntax_unclosed_expression", "{{ 1 + }}", {}),
    ("syntax_unclosed_variable", "ok\n\n{{ x ", {}),
    ("syntax_unclosed_comment", "{# never closed", {}),
    ("syntax_unclosed_string", "{{ 'abc }}", {}),
    ("syntax_bad_paren", "{{ (1 + 2 }}", {}),
    ("syntax_unbalanced_close", "{{ 1 ) }}", {}),
    ("syntax_else_twice", "{% if a %}{% else %}{% else %}{% endif %}", {}),
    ("syntax_extends_unsupported", "{% extends 'base.html' %}", {}),
    ("syntax_bad_assign", "{% set 1 = 2 %}", {}),
    ("syntax_macro_default_order", "{% macro m(a=1, b) %}{% endmacro %}", {}),
]


def render_constructs():
    out = []
    for name, template, context in CONSTRUCTS:
        case = {"name": name, "template": template, "context": context}
        try:
            case["expected"] = _compile_jinja_template(template).render(**context)
        except Exception as exc:
            case["error"] = describe_error(exc)
        out.append(case)
    return out


def write_json(path: str, data) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main() -> int:
    os.makedirs(OUT_DIR, exist_ok=True)
    for name, text in TEMPLATES.items():
        with open(os.path.join(OUT_DIR, name + ".jinja"), "w", encoding="utf-8", newline="") as f:
            f.write(text)
    seed_dir = os.path.join(OUT_DIR, "fuzz_seeds")
    os.makedirs(seed_dir, exist_ok=True)
    for old in os.listdir(seed_dir):
        os.remove(os.path.join(seed_dir, old))
    seeds = list(TEMPLATES.items()) + [(name, text) for name, text, _ in CONSTRUCTS]
    for name, text in seeds:
        with open(os.path.join(seed_dir, name), "w", encoding="utf-8", newline="") as f:
            f.write(text)
    meta = {"transformers": transformers.__version__, "jinja2": jinja2.__version__}
    conversations = render_conversations()
    constructs = render_constructs()
    write_json(os.path.join(OUT_DIR, "conversations.json"), {"generated_by": meta, "cases": conversations})
    write_json(os.path.join(OUT_DIR, "constructs.json"), {"generated_by": meta, "cases": constructs})
    num_conv_errors = sum("error" in c for c in conversations)
    num_construct_errors = sum("error" in c for c in constructs)
    print(f"{len(TEMPLATES)} templates, {len(conversations)} conversation renders "
          f"({num_conv_errors} raise), {len(constructs)} constructs ({num_construct_errors} raise)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

// Chat templates rendered as Transformers renders them: the golden Qwen3 renderings byte for byte,
// Llama 3.1 and Qwen2.5 shaped templates, config loading, and the CLI.
#include "kiln/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/core/error.h"
#include "tests/support.h"

namespace kt = kiln::tokenizer;
using OJ = nlohmann::ordered_json;

namespace {

std::string shared(const std::string& rel) { return std::string(KILN_SHARED_DIR) + "/" + rel; }

std::vector<OJ> golden_rows() {
  std::ifstream in(shared("testdata/chat/qwen3_chat.jsonl"));
  std::vector<OJ> rows;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(OJ::parse(line));
  return rows;
}

kt::ChatTemplateOptions options_from(const OJ& kwargs) {
  kt::ChatTemplateOptions o;
  o.extra_kwargs = OJ::object();
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
    if (it.key() == "add_generation_prompt") {
      o.add_generation_prompt = it.value().get<bool>();
    } else if (it.key() == "tools") {
      o.tools = it.value();
    } else {
      o.extra_kwargs[it.key()] = it.value();
    }
  }
  return o;
}

// A scratch folder removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("kiln_chat_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
            std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
  }
};

// Llama 3.1 and Qwen2.5 chat templates as published (Llama 3.2 date logic), rendered once with
// Python jinja2 configured as Transformers configures it; the expected strings are pasted.
const char* kLlamaTemplate = R"TPL({{- bos_token }}
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
)TPL";
const char* kQwen25Template = R"TPL({%- if tools %}
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
)TPL";
struct ModelCase {
  const char* name;
  const char* messages;
  const char* tools;  // "null" when absent
  const char* extra;
  const char* llama;   // add_generation_prompt=true
  const char* qwen25;  // add_generation_prompt = (name != "plain")
};
const ModelCase kModelCases[] = {
    {"plain",
     "[{\"role\": \"system\", \"content\": \"  You are terse.  \"}, {\"role\": \"user\", \"content\": \"Hi there\\n\"}, {\"role\": \"assistant\", \"content\": \"Hello.\"}, {\"role\": \"user\", \"content\": \"Weather\077\"}]",
     "null",
     "{}",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWeather\077<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|im_start|>system\n  You are terse.  <|im_end|>\n<|im_start|>user\nHi there\n<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWeather\077<|im_end|>\n"},
    {"no_system",
     "[{\"role\": \"user\", \"content\": \"What is 2+2\077\"}]",
     "null",
     "{}",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2\077<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2\077<|im_end|>\n<|im_start|>assistant\n"},
    {"tools",
     "[{\"role\": \"user\", \"content\": \"Weather in Z\303\274rich\077\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\303\274rich\", \"days\": 2}}}]}, {\"role\": \"tool\", \"content\": \"{\\\"temp\\\": 21.5}\"}, {\"role\": \"tool\", \"content\": \"sunny\"}]",
     "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city, in \302\260C.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1}}, \"required\": [\"city\"]}}}]",
     "{}",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        \"description\": \"Weather for a city, in \302\260C.\",\n        \"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\"\n                },\n                \"days\": {\n                    \"type\": \"integer\",\n                    \"default\": 1\n                }\n            },\n            \"required\": [\n                \"city\"\n            ]\n        }\n    }\n}\n\nWeather in Z\303\274rich\077<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Z\303\274rich\", \"days\": 2}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"temp\\\": 21.5}\"<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"sunny\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city, in \302\260C.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Z\303\274rich\077<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\303\274rich\", \"days\": 2}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": 21.5}\n</tool_response>\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n"},
    {"tools_system",
     "[{\"role\": \"system\", \"content\": \"Use tools.\"}, {\"role\": \"user\", \"content\": \"Weather\077\"}]",
     "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city, in \302\260C.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1}}, \"required\": [\"city\"]}}}]",
     "{\"tools_in_user_message\": false}",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou have access to the following functions. To call a function, please respond with JSON for a function call.Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        \"description\": \"Weather for a city, in \302\260C.\",\n        \"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\"\n                },\n                \"days\": {\n                    \"type\": \"integer\",\n                    \"default\": 1\n                }\n            },\n            \"required\": [\n                \"city\"\n            ]\n        }\n    }\n}\n\nUse tools.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWeather\077<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|im_start|>system\nUse tools.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a city, in \302\260C.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather\077<|im_end|>\n<|im_start|>assistant\n"},
    {"builtin",
     "[{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"search\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"function\": {\"name\": \"brave_search\", \"arguments\": {\"query\": \"kiln\"}}}]}, {\"role\": \"ipython\", \"content\": {\"results\": [\"a\"]}}]",
     "null",
     "{\"builtin_tools\": [\"brave_search\", \"code_interpreter\"]}",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nTools: brave_search\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nsys<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nsearch<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n<|python_tag|>brave_search.call(query=\"kiln\")<|eom_id|><|start_header_id|>ipython<|end_header_id|>\n\n{\"results\": [\"a\"]}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nsearch<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"brave_search\", \"arguments\": {\"query\": \"kiln\"}}\n</tool_call><|im_end|>\n<|im_start|>assistant\n"},
};

}  // namespace

TEST(ChatTemplate, GoldenQwen3Renderings) {
  auto rows = golden_rows();
  ASSERT_EQ(rows.size(), 14u);
  for (const char* dir : {"models/qwen3-tokenizer", "testdata/models/tiny"}) {
    kt::ChatTemplateConfig cfg = kt::load_chat_template_config(shared(dir));
    EXPECT_EQ(cfg.eos_token, "<|im_end|>");
    EXPECT_EQ(cfg.bos_token, "");
    for (const auto& row : rows) {
      std::string got = kt::apply_chat_template(cfg, row["messages"], options_from(row["kwargs"]));
      EXPECT_EQ(got, row["rendered"].get<std::string>()) << dir << " case " << row["name"];
    }
  }
}

TEST(ChatTemplate, Qwen3ContentNoneFailsLikePython) {
  kt::ChatTemplateConfig cfg = kt::load_chat_template_config(shared("models/qwen3-tokenizer"));
  OJ messages = OJ::parse(R"([{"role":"user","content":"hi"},{"role":"assistant","content":null}])");
  // Python: '</think>' in None is a TypeError; the error names the template file and line.
  try {
    kt::apply_chat_template(cfg, messages);
    FAIL() << "expected an error";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("argument of type 'NoneType' is not iterable"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, Llama31AndQwen25Templates) {
  TempDir llama, qwen;
  OJ llama_cfg = {{"bos_token", {{"content", "<|begin_of_text|>"}, {"lstrip", false}}},
                  {"eos_token", "<|eot_id|>"},
                  {"chat_template", kLlamaTemplate}};
  llama.write("tokenizer_config.json", llama_cfg.dump());
  qwen.write("tokenizer_config.json", R"({"bos_token": null, "eos_token": "<|im_end|>"})");
  qwen.write("chat_template.jinja", kQwen25Template);
  kt::ChatTemplateConfig lcfg = kt::load_chat_template_config(llama.path.string());
  kt::ChatTemplateConfig qcfg = kt::load_chat_template_config(qwen.path.string());
  EXPECT_EQ(lcfg.bos_token, "<|begin_of_text|>");
  EXPECT_NE(qcfg.where.find("chat_template.jinja"), std::string::npos);
  for (const ModelCase& c : kModelCases) {
    SCOPED_TRACE(c.name);
    kt::ChatTemplateOptions o;
    o.tools = OJ::parse(c.tools);
    o.extra_kwargs = OJ::parse(c.extra);
    o.extra_kwargs["date_string"] = "26 Jul 2024";
    o.add_generation_prompt = true;
    OJ messages = OJ::parse(c.messages);
    EXPECT_EQ(kt::apply_chat_template(lcfg, messages, o), c.llama);
    o.extra_kwargs = OJ::object();
    o.add_generation_prompt = std::string(c.name) != "plain";
    EXPECT_EQ(kt::apply_chat_template(qcfg, messages, o), c.qwen25);
  }
}

TEST(ChatTemplate, LlamaDateFromStrftimeNow) {
  kt::ChatTemplateConfig cfg;
  cfg.source = kLlamaTemplate;
  cfg.bos_token = "<|begin_of_text|>";
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "Today Date: %d %b %Y\n", &tm);
  std::string out = kt::apply_chat_template(cfg, OJ::parse(R"([{"role":"user","content":"x"}])"));
  EXPECT_NE(out.find(buf), std::string::npos) << out;
}

TEST(ChatTemplate, RaiseExceptionNamesFileAndLine) {
  TempDir dir;
  dir.write("tokenizer_config.json", OJ({{"chat_template", kLlamaTemplate}}).dump());
  kt::ChatTemplateConfig cfg = kt::load_chat_template_config(dir.path.string());
  OJ call = OJ::parse(R"({"function": {"name": "f", "arguments": {}}})");
  OJ messages = OJ::array({OJ{{"role", "user"}, {"content", "x"}},
                           OJ{{"role", "assistant"}, {"content", ""}, {"tool_calls", OJ::array({call, call})}}});
  try {
    kt::apply_chat_template(cfg, messages);
    FAIL() << "expected an error";
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.where(), (dir.path / "tokenizer_config.json").string() + ":75");
    EXPECT_NE(std::string(e.what()).find("This model only supports single tool-calls at once!"),
              std::string::npos);
  }
}

TEST(ChatTemplate, ConfigForms) {
  TempDir dir;
  // Named templates: "default" normally, "tool_use" when tools are given.
  dir.write("tokenizer_config.json", R"({"eos_token": {"content": "</s>"}, "chat_template": [
      {"name": "default", "template": "D{{ eos_token }}"},
      {"name": "tool_use", "template": "T{{ tools|length }}"}]})");
  kt::ChatTemplateConfig cfg = kt::load_chat_template_config(dir.path.string());
  EXPECT_EQ(cfg.eos_token, "</s>");
  EXPECT_EQ(kt::apply_chat_template(cfg, OJ::array()), "D</s>");
  kt::ChatTemplateOptions o;
  o.tools = OJ::parse(R"([{"name": "a"}, {"name": "b"}])");
  EXPECT_EQ(kt::apply_chat_template(cfg, OJ::array(), o), "T2");

  // A chat_template.jinja beside the config wins (newer Transformers).
  dir.write("chat_template.jinja", "J{{ messages|length }}\n");
  cfg = kt::load_chat_template_config(dir.path.string());
  EXPECT_EQ(kt::apply_chat_template(cfg, OJ::array()), "J0");

  // Bad inputs name the culprit.
  TempDir empty;
  empty.write("tokenizer_config.json", R"({"eos_token": "x"})");
  try {
    kt::load_chat_template_config(empty.path.string());
    FAIL();
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.where(), empty.path.string());
  }
  TempDir bad;
  bad.write("tokenizer_config.json", R"({"bos_token": 3, "chat_template": "x"})");
  EXPECT_THROW(kt::load_chat_template_config(bad.path.string()), kiln::Error);
  EXPECT_THROW(kt::load_chat_template_config("/nonexistent/kiln/folder"), kiln::Error);
  EXPECT_THROW(kt::apply_chat_template(cfg, OJ::object()), kiln::Error);
  kt::ChatTemplateOptions reserved;
  reserved.extra_kwargs = {{"messages", 1}};
  EXPECT_THROW(kt::apply_chat_template(cfg, OJ::array(), reserved), kiln::Error);
}

TEST(ChatTemplate, CliPrintsTheRenderingExactly) {
  auto rows = golden_rows();
  TempDir dir;
  for (const auto& row : rows) {
    SCOPED_TRACE(row["name"].get<std::string>());
    OJ kwargs = row["kwargs"];
    std::string tools_arg;
    if (kwargs.contains("tools")) {  // tools through --tools FILE, the rest through --kwargs
      dir.write("tools.json", kwargs["tools"].dump());
      tools_arg = " --tools " + (dir.path / "tools.json").string();
      kwargs.erase("tools");
    }
    std::string gen_arg;
    if (kwargs.value("add_generation_prompt", false)) gen_arg = " --add-generation-prompt";
    kwargs.erase("add_generation_prompt");
    dir.write("messages.json", row["messages"].dump());
    dir.write("kwargs.json", kwargs.dump());
    std::string cmd = std::string(KILN_BINARY_DIR) + "/tools/cli/kiln apply-chat-template " +
                      shared("models/qwen3-tokenizer") + " --messages " +
                      (dir.path / "messages.json").string() + gen_arg + tools_arg + " --kwargs \"$(cat " +
                      (dir.path / "kwargs.json").string() + ")\"";
    int status = -1;
    const std::string out = kiln::test_support::run_command(cmd, &status);
    EXPECT_EQ(status, 0);
    EXPECT_EQ(out, row["rendered"].get<std::string>());
  }
  // A bad messages file is a one-line error and exit status 1.
  std::string cmd = std::string(KILN_BINARY_DIR) + "/tools/cli/kiln apply-chat-template " +
                    shared("models/qwen3-tokenizer") + " --messages /nonexistent.json 2>&1";
  int status = -1;
  const std::string out = kiln::test_support::run_command(cmd, &status);
  ASSERT_NE(status, -1);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(out.find("--messages /nonexistent.json"), std::string::npos) << out;
}

// Chat templates: every family renders the conversation llama.cpp's template tests use to the exact string
// llama.cpp's built-in renderer produces (and so the model's own Jinja template, up to the differences
// llama.cpp documents); the families are recognised from models' Jinja templates; names and errors.
#include "h2okv/serve/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "h2okv/gguf/gguf.h"

namespace h2okv::serve {
namespace {

const std::vector<chat_message> k_conversation = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};

struct rendering {
    chat_template tmpl;
    std::string expected;
};

// The strings of llama.cpp's tests/test-chat-template.cpp for the same conversation (MIT), except for
// llama2-sys, mistral-v7-tekken and zephyr, which those tests do not render: theirs follow llama.cpp's
// renderer (llama2-sys-bos without the inner <s>, mistral-v7 without its spaces, phi3's tags with
// <|endoftext|>).
const std::vector<rendering> k_renderings = {
    {chat_template::chatml,
     "<|im_start|>system\nYou are a helpful "
     "assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>"
     "assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am "
     "an "
     "assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n"},
    {chat_template::llama2,
     "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an "
     "assistant   </s>[INST] Another question [/INST]"},
    {chat_template::llama2_sys,
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are you "
     "[/INST]   I am an assistant   </s>[INST] Another question [/INST]"},
    {chat_template::llama2_sys_bos,
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s><s>[INST] Who are "
     "you "
     "[/INST]   I am an assistant   </s><s>[INST] Another question [/INST]"},
    {chat_template::llama2_sys_strip,
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are you "
     "[/INST]I am an assistant</s>[INST] Another question [/INST]"},
    {chat_template::mistral_v1,
     " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]    I am "
     "an "
     "assistant   </s> [INST] Another question [/INST]"},
    {chat_template::mistral_v3,
     "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] I am an "
     "assistant</s>[INST] Another question[/INST]"},
    {chat_template::mistral_v3_tekken,
     "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an "
     "assistant   </s>[INST]Another question[/INST]"},
    {chat_template::mistral_v7,
     "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] Who "
     "are "
     "you[/INST]    I am an assistant   </s>[INST] Another question[/INST]"},
    {chat_template::mistral_v7_tekken,
     "[SYSTEM_PROMPT]You are a helpful assistant[/SYSTEM_PROMPT][INST]Hello[/INST]Hi there</s>[INST]Who are "
     "you[/INST]   I am an assistant   </s>[INST]Another question[/INST]"},
    {chat_template::phi3,
     "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi "
     "there<|end|>\n"
     "<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother "
     "question<|end|>\n<|assistant|>\n"},
    {chat_template::zephyr,
     "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n<|assistant|>\nHi "
     "there<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n<|assistant|>\n   I am an assistant   "
     "<|endoftext|>\n<|user|>\nAnother question<|endoftext|>\n<|assistant|>\n"},
    {chat_template::gemma,
     "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi "
     "there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an "
     "assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n"},
    {chat_template::llama3,
     "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
     "assistant<|eot_id|><|start_header_id|>user<|"
     "end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi "
     "there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are "
     "you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an "
     "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother "
     "question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
};

TEST(ChatTemplate, EveryFamilyRendersTheReferenceConversation) {
    ASSERT_EQ(k_renderings.size(), 14u) << "a family without a reference rendering";
    for (const auto& r : k_renderings) {
        EXPECT_EQ(render_chat(r.tmpl, k_conversation), r.expected) << chat_template_name(r.tmpl);
    }
}

TEST(ChatTemplate, OneUserTurn) {
    const std::vector<chat_message> one = {{"user", "Hi"}};
    EXPECT_EQ(render_chat(chat_template::chatml, one),
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(render_chat(chat_template::llama2_sys, one), "[INST] Hi [/INST]");
    EXPECT_EQ(render_chat(chat_template::gemma, one),
              "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
    EXPECT_EQ(render_chat(chat_template::llama3, one),
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_"
              "header_id|>"
              "\n\n");
}

struct detection {
    const char* model;
    const char* jinja;
    chat_template expected;
};

// Jinja templates of these models, shortened to the parts llama.cpp's detection reads.
const std::vector<detection> k_detections = {
    {"teknium/OpenHermes-2.5-Mistral-7B",
     "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
     "'<|im_end|>' "
     "+ '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
     chat_template::chatml},
    {"Qwen/Qwen2-7B-Instruct",
     "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
     "'<|im_start|>system\\nYou "
     "are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
     "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
     chat_template::chatml},
    {"mistralai/Mistral-7B-Instruct-v0.2",
     "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
     "message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + "
     "eos_token}}{% endif %}{% endfor %}",
     chat_template::llama2},
    {"Llama-2 chat with BOS before every [INST]",
     "{% if messages[0]['role'] == 'system' %}{% set system_message = '<<SYS>>\\n' + messages[0]['content'] "
     "| trim + "
     "'\\n<</SYS>>\\n\\n' %}{% endif %}{% for message in messages %}{% if message['role'] == 'user' %}{{ "
     "bos_token + "
     "'[INST] ' + content | trim + ' [/INST]' }}{% endif %}{% endfor %}",
     chat_template::llama2_sys_bos},
    {"a Llama-2 template that strips the messages",
     "{{ bos_token }}{% for message in messages %}{% set content = message['content'] %}{% if "
     "message['role'] == "
     "'system' %}{{ '<<SYS>>\\n' + content.strip() + '\\n<</SYS>>\\n\\n' }}{% elif message['role'] == 'user' "
     "%}{{ "
     "'[INST] ' + content.strip() + ' [/INST]' }}{% endif %}{% endfor %}",
     chat_template::llama2_sys_strip},
    {"mistralai/Mistral-7B-Instruct-v0.3 (v1 with system)",
     "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}{%- endif "
     "%}{{- "
     "bos_token }}{%- if loop.first and system_message is defined %}{{- ' [INST] ' + system_message + "
     "'\\n\\n' + "
     "message['content'] + ' [/INST]' }}{%- endif %}",
     chat_template::mistral_v1},
    {"mistralai/Mistral-Large-Instruct-2407",
     "{%- for message in loop_messages %}{%- if message[\"role\"] == \"user\" %}{%- if tools is not none "
     "%}{{- "
     "\"[AVAILABLE_TOOLS] [\" }}{%- endif %}{{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}{%- endif "
     "%}{%- "
     "endfor %}",
     chat_template::mistral_v3},
    {"mistralai/Mistral-Nemo-Instruct-2407",
     "{%- for message in loop_messages %}{%- if message[\"role\"] == \"user\" %}{%- if tools is not none "
     "%}{{- "
     "\"[AVAILABLE_TOOLS][\" }}{%- endif %}{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}{%- endif "
     "%}{%- "
     "endfor %}",
     chat_template::mistral_v3_tekken},
    {"mistralai/Mistral-Large-Instruct-2411",
     "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
     "message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + "
     "message['content'] + '[/SYSTEM_PROMPT]' }}{% endif %}{% endfor %}",
     chat_template::mistral_v7},
    {"microsoft/Phi-3-mini-4k-instruct",
     "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + "
     "message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == "
     "'assistant') "
     "%}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}",
     chat_template::phi3},
    {"a Zephyr-style template (llama.cpp reads <|user|> and <|endoftext|>, without <|assistant|>)",
     "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + "
     "'<|endoftext|>\\n' }}{% else %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + "
     "'<|endoftext|>\\n' }}{% endif %}{% endfor %}",
     chat_template::zephyr},
    {"google/gemma-7b-it",
     "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') "
     "}}{% "
     "endif %}{% for message in messages %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + "
     "'<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif "
     "%}",
     chat_template::gemma},
    {"meta-llama/Meta-Llama-3-8B-Instruct",
     "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
     "'<|start_header_id|>' + "
     "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if "
     "loop.index0 == 0 "
     "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{{ "
     "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}",
     chat_template::llama3},
};

TEST(ChatTemplate, DetectsRealTemplates) {
    for (const auto& d : k_detections) {
        const auto t = detect_chat_template(d.jinja);
        ASSERT_TRUE(t.has_value()) << d.model;
        EXPECT_EQ(chat_template_name(*t), std::string(chat_template_name(d.expected))) << d.model;
    }
}

TEST(ChatTemplate, FamiliesOthersWouldMatchFirstAreNotMistaken) {
    // Phi-4 carries <|im_start|> but is not ChatML; Falcon 3 has <|assistant|> and <|user|> but not Zephyr's.
    EXPECT_FALSE(detect_chat_template("{{'<|im_start|>' + message['role'] + '<|im_sep|>'}}").has_value());
    EXPECT_FALSE(detect_chat_template("<|user|>\\n{{ content }}</s><|assistant|>").has_value());
    EXPECT_FALSE(detect_chat_template("{{ message['content'] }}").has_value());
    auto r = parse_chat_template("{{'<|im_start|>' + message['role'] + '<|im_sep|>'}}");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message().find("'phi4', which h2okv does not render"), std::string::npos)
        << r.error().message();
}

TEST(ChatTemplate, NamesRoundTrip) {
    for (const auto& r : k_renderings) {
        auto t = parse_chat_template(chat_template_name(r.tmpl));
        ASSERT_TRUE(t.ok()) << t.error().message();
        EXPECT_EQ(*t, r.tmpl);
    }
    auto bad = parse_chat_template("chatml2");
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(
        bad.error().message(),
        "unknown chat template 'chatml2'; valid: chatml, llama2, llama2-sys, llama2-sys-bos, "
        "llama2-sys-strip, "
        "mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7, mistral-v7-tekken, phi3, zephyr, gemma, "
        "llama3 (or a Jinja template of one of them)");
}

std::unique_ptr<gguf::file> file_with(std::vector<std::byte>& bytes, const char* tmpl) {
    gguf::writer w;
    w.set_string("general.architecture", "llama");
    if (tmpl != nullptr) w.set_string("tokenizer.chat_template", tmpl);
    bytes = w.to_bytes();
    auto f = gguf::file::parse(bytes.data(), bytes.size());
    EXPECT_TRUE(f.ok()) << f.error().to_string();
    return f.ok() ? std::move(f).value() : nullptr;
}

TEST(ChatTemplate, FromModelMetadata) {
    std::vector<std::byte> bytes;
    auto none = file_with(bytes, nullptr);
    ASSERT_NE(none, nullptr);
    auto t = model_chat_template(*none);
    ASSERT_TRUE(t.ok());
    EXPECT_FALSE(t->has_value());

    auto chatml = file_with(bytes, k_detections[0].jinja);
    ASSERT_NE(chatml, nullptr);
    t = model_chat_template(*chatml);
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE(t->has_value());
    EXPECT_EQ(**t, chat_template::chatml);

    auto unknown = file_with(bytes, "{{ messages | tojson }}");
    ASSERT_NE(unknown, nullptr);
    t = model_chat_template(*unknown);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().message().find("--chat-template NAME"), std::string::npos) << t.error().message();
}

TEST(ChatTemplate, RealVocabularyFile) {
    const std::string path = std::string(H2OKV_SHARED_DIR) + "/vocab/ggml-vocab-phi-3.gguf";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "needs " << path << " (../shared)";
    auto f = gguf::file::open(path);
    ASSERT_TRUE(f.ok()) << f.error().to_string();
    auto t = model_chat_template(**f);
    ASSERT_TRUE(t.ok()) << t.error().to_string();
    ASSERT_TRUE(t->has_value());
    EXPECT_EQ(**t, chat_template::phi3);
}

}  // namespace
}  // namespace h2okv::serve

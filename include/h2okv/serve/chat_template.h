// Chat templates: how a model wants a conversation laid out as one prompt. A GGUF file carries its template
// as Jinja text (tokenizer.chat_template); h2okv does not run Jinja but recognises the common families by
// their markers, as llama.cpp's template detection does, and renders each family with a fixed function that
// gives the same string llama.cpp's built-in renderer gives (BOS excluded: the tokenizer adds it).
//
//   H2OKV_ASSIGN_OR_RETURN(auto t, serve::parse_chat_template("chatml"));   // a name, or a Jinja text
//   std::vector<serve::chat_message> msgs = {{"system", "Be brief."}, {"user", "Hi"}};
//   std::string prompt = serve::render_chat(t, msgs);
//   // "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
//
// Roles are written as given ("system", "user", "assistant"); templates without a system turn fold the system
// text into the next user turn (llama2, gemma). Every render ends with the assistant's opening, so the model
// continues as the assistant.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/gguf/gguf.h"

namespace h2okv::serve {

// The families, named as llama.cpp names them (--chat-template NAME).
enum class chat_template {
    chatml,             // <|im_start|>role\n...<|im_end|> (Qwen, OpenHermes, SmolLM, ...)
    llama2,             // [INST] ... [/INST], no system turn (Mistral 7B v0.1/v0.2)
    llama2_sys,         // [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] (Llama 2 chat)
    llama2_sys_bos,     // llama2-sys with <s> before every later [INST]
    llama2_sys_strip,   // llama2-sys with every message trimmed
    mistral_v1,         // " [INST] ... [/INST] ...</s>"
    mistral_v3,         // "[INST] ...[/INST] ...</s>", assistant text trimmed
    mistral_v3_tekken,  // "[INST]...[/INST]...</s>"
    mistral_v7,         // [SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] ...[/INST] ...</s>
    mistral_v7_tekken,  // mistral-v7 without the spaces
    phi3,               // <|role|>\n...<|end|>\n
    zephyr,             // <|role|>\n...<|endoftext|>\n
    gemma,              // <start_of_turn>user\n...<end_of_turn>\n, "model" for the assistant
    llama3,             // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
};

struct chat_message {
    std::string role;
    std::string content;
};

const char* chat_template_name(chat_template t);  // "chatml", "llama2-sys", ...
std::string chat_template_names();                // every name, comma-separated

// The family of a Jinja template text, by the markers llama.cpp looks for; nullopt when none matches.
std::optional<chat_template> detect_chat_template(std::string_view jinja);
// A family name, or a Jinja template text to recognise. The error lists the names.
result<chat_template> parse_chat_template(std::string_view name_or_jinja);
// The family of the model's tokenizer.chat_template: nullopt when the file has none; an error when it has
// one that is not a string or matches no family (the message says to pass --chat-template).
result<std::optional<chat_template>> model_chat_template(const gguf::file& file);

// The prompt for `messages` followed by the assistant's opening.
std::string render_chat(chat_template t, std::span<const chat_message> messages);

}  // namespace h2okv::serve

#include "h2okv/serve/chat_template.h"

#include <fmt/format.h>

#include <array>

namespace h2okv::serve {
namespace {

// Leading and trailing ASCII whitespace removed (what Jinja's |trim and llama.cpp's renderer strip).
std::string trim(std::string_view s) {
    const auto space = [](char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
    };
    while (!s.empty() && space(s.front())) s.remove_prefix(1);
    while (!s.empty() && space(s.back())) s.remove_suffix(1);
    return std::string(s);
}

using messages = std::span<const chat_message>;

std::string render_chatml(messages ms) {
    std::string out;
    for (const auto& m : ms) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    return out + "<|im_start|>assistant\n";
}

// Llama 2 and its variants: the first [INST] opens without BOS (the tokenizer adds it); an assistant turn
// closes with </s> and the next message opens a new [INST].
std::string render_llama2(messages ms, bool system_turn, bool bos_inside, bool strip) {
    std::string out = "[INST] ";
    bool inside_turn = true;
    for (const auto& m : ms) {
        const std::string content = strip ? trim(m.content) : m.content;
        if (!inside_turn) {
            inside_turn = true;
            out += bos_inside ? "<s>[INST] " : "[INST] ";
        }
        if (m.role == "system") {
            out += system_turn ? "<<SYS>>\n" + content + "\n<</SYS>>\n\n" : content + "\n";
        } else if (m.role == "user") {
            out += content + " [/INST]";
        } else {
            out += content + "</s>";
            inside_turn = false;
        }
    }
    return out;
}

// Mistral's v1, v3 and v3-tekken templates differ only in the spaces around [INST] and in trimming the
// assistant's text.
std::string render_mistral(messages ms, const char* leading, const char* trailing, bool trim_assistant) {
    std::string out;
    bool inside_turn = false;
    for (const auto& m : ms) {
        if (!inside_turn) {
            out += fmt::format("{}[INST]{}", leading, trailing);
            inside_turn = true;
        }
        if (m.role == "system") {
            out += m.content + "\n\n";
        } else if (m.role == "user") {
            out += m.content + leading + "[/INST]";
        } else {
            out += trailing + (trim_assistant ? trim(m.content) : m.content) + "</s>";
            inside_turn = false;
        }
    }
    return out;
}

std::string render_mistral_v7(messages ms, const char* space) {
    std::string out;
    for (const auto& m : ms) {
        if (m.role == "system") {
            out += fmt::format("[SYSTEM_PROMPT]{}{}[/SYSTEM_PROMPT]", space, m.content);
        } else if (m.role == "user") {
            out += fmt::format("[INST]{}{}[/INST]", space, m.content);
        } else {
            out += fmt::format("{}{}</s>", space, m.content);
        }
    }
    return out;
}

// <|role|>\ncontent<END>\n per message, then <|assistant|>\n (Phi-3 ends turns with <|end|>, Zephyr with
// <|endoftext|>).
std::string render_role_tags(messages ms, const char* end) {
    std::string out;
    for (const auto& m : ms) out += "<|" + m.role + "|>\n" + m.content + end + "\n";
    return out + "<|assistant|>\n";
}

// Gemma has no system turn: the system text opens the next user turn. The assistant is "model".
std::string render_gemma(messages ms) {
    std::string out, system;
    for (const auto& m : ms) {
        if (m.role == "system") {
            system += trim(m.content);
            continue;
        }
        const std::string role = m.role == "assistant" ? "model" : m.role;
        out += "<start_of_turn>" + role + "\n";
        if (!system.empty() && role != "model") {
            out += system + "\n\n";
            system.clear();
        }
        out += trim(m.content) + "<end_of_turn>\n";
    }
    return out + "<start_of_turn>model\n";
}

std::string render_llama3(messages ms) {
    std::string out;
    for (const auto& m : ms)
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
    return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
}

struct family {
    chat_template id;
    const char* name;
    std::string (*render)(messages);
};

constexpr std::array<family, 14> k_families = {{
    {chat_template::chatml, "chatml", render_chatml},
    {chat_template::llama2, "llama2", [](messages ms) { return render_llama2(ms, false, false, false); }},
    {chat_template::llama2_sys, "llama2-sys",
     [](messages ms) { return render_llama2(ms, true, false, false); }},
    {chat_template::llama2_sys_bos, "llama2-sys-bos",
     [](messages ms) { return render_llama2(ms, true, true, false); }},
    {chat_template::llama2_sys_strip, "llama2-sys-strip",
     [](messages ms) { return render_llama2(ms, true, false, true); }},
    {chat_template::mistral_v1, "mistral-v1",
     [](messages ms) { return render_mistral(ms, " ", " ", false); }},
    {chat_template::mistral_v3, "mistral-v3", [](messages ms) { return render_mistral(ms, "", " ", true); }},
    {chat_template::mistral_v3_tekken, "mistral-v3-tekken",
     [](messages ms) { return render_mistral(ms, "", "", false); }},
    {chat_template::mistral_v7, "mistral-v7", [](messages ms) { return render_mistral_v7(ms, " "); }},
    {chat_template::mistral_v7_tekken, "mistral-v7-tekken",
     [](messages ms) { return render_mistral_v7(ms, ""); }},
    {chat_template::phi3, "phi3", [](messages ms) { return render_role_tags(ms, "<|end|>"); }},
    {chat_template::zephyr, "zephyr", [](messages ms) { return render_role_tags(ms, "<|endoftext|>"); }},
    {chat_template::gemma, "gemma", render_gemma},
    {chat_template::llama3, "llama3", render_llama3},
}};

const family* find_family(std::string_view name) {
    for (const auto& f : k_families) {
        if (name == f.name) return &f;
    }
    return nullptr;
}

// llama.cpp's detection order, families h2okv does not render included (by their llama.cpp names): a template
// that matches one of those must not fall through to a later, wrong family.
std::string_view detect_family(std::string_view t) {
    const auto has = [t](std::string_view s) { return t.find(s) != std::string_view::npos; };
    if (has("<|im_start|>")) {
        if (has("<|im_sep|>")) return "phi4";
        if (has("<end_of_utterance>")) return "smolvlm";
        return "chatml";
    }
    if (t.substr(0, 7) == "mistral" || has("[INST]")) {
        if (has("[SYSTEM_PROMPT]")) return "mistral-v7";
        if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
            if (has(" [INST]")) return "mistral-v1";
            if (has("\"[INST]\"")) return "mistral-v3-tekken";
            return "mistral-v3";
        }
        if (has("content.strip()")) return "llama2-sys-strip";
        if (has("bos_token + '[INST]")) return "llama2-sys-bos";
        if (has("<<SYS>>")) return "llama2-sys";
        return "llama2";
    }
    if (has("<|assistant|>") && has("<|end|>")) return "phi3";
    if (has("[gMASK]<sop>")) return "chatglm4";
    if (has("<|assistant|>") && has("<|user|>")) return has("</s>") ? "falcon3" : "glmedge";
    if (has("<|user|>") && has("<|endoftext|>")) return "zephyr";
    if (has("bos_token + message['role']")) return "monarch";
    if (has("<start_of_turn>")) return "gemma";
    if (has("'\\n\\nAssistant: ' + eos_token")) return "orion";
    if (has("GPT4 Correct ")) return "openchat";
    if (has("USER: ") && has("ASSISTANT: ")) return has("SYSTEM: ") ? "vicuna-orca" : "vicuna";
    if (has("### Instruction:") && has("<|EOT|>")) return "deepseek";
    if (has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>")) return "command-r";
    if (has("<|start_header_id|>") && has("<|end_header_id|>")) return "llama3";
    return {};
}

// The first line of a template, shortened, to name it in a message.
std::string excerpt(std::string_view t) {
    t = t.substr(0, t.find('\n'));
    return t.size() > 60 ? fmt::format("{}...", t.substr(0, 60)) : std::string(t);
}

}  // namespace

const char* chat_template_name(chat_template t) {
    for (const auto& f : k_families) {
        if (f.id == t) return f.name;
    }
    return "unknown";
}

std::string chat_template_names() {
    std::string out;
    for (const auto& f : k_families) out += (out.empty() ? "" : ", ") + std::string(f.name);
    return out;
}

std::optional<chat_template> detect_chat_template(std::string_view jinja) {
    if (const family* f = find_family(detect_family(jinja))) return f->id;
    return std::nullopt;
}

result<chat_template> parse_chat_template(std::string_view name_or_jinja) {
    if (const family* f = find_family(name_or_jinja)) return f->id;
    if (auto t = detect_chat_template(name_or_jinja)) return *t;
    const std::string_view other = detect_family(name_or_jinja);
    if (!other.empty()) {
        return invalid_argument(
            "chat template '{}' is llama.cpp's '{}', which h2okv does not render; valid: {}",
            excerpt(name_or_jinja), other, chat_template_names());
    }
    return invalid_argument("unknown chat template '{}'; valid: {} (or a Jinja template of one of them)",
                            excerpt(name_or_jinja), chat_template_names());
}

result<std::optional<chat_template>> model_chat_template(const gguf::file& file) {
    constexpr const char* key = "tokenizer.chat_template";
    if (!file.has(key)) return std::optional<chat_template>();
    auto text = file.get_string(key);
    if (!text.ok()) return text.error();
    if (auto t = detect_chat_template(*text)) return std::optional<chat_template>(*t);
    const std::string_view other = detect_family(*text);
    return invalid_file("the model's {} ('{}') is {}; start the server with --chat-template NAME ({})", key,
                        excerpt(*text),
                        other.empty() ? std::string("none of the families h2okv recognises")
                                      : fmt::format("llama.cpp's '{}', which h2okv does not render", other),
                        chat_template_names());
}

std::string render_chat(chat_template t, std::span<const chat_message> messages) {
    for (const auto& f : k_families) {
        if (f.id == t) return f.render(messages);
    }
    return {};
}

}  // namespace h2okv::serve

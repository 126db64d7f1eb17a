// The task files: COPA's XML, LLM-Adapters' instruction JSON, and lm-eval's prompt for each task.
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "h2okv/eval/tasks.h"

namespace h2okv::eval {
namespace {

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// Just enough XML for copa.dtd: a prolog (declaration, DOCTYPE, comments), elements with quoted attributes,
// character data with the five predefined entities and character references, CDATA sections.
struct xml_element {
    std::string name;
    std::map<std::string, std::string> attrs;
    std::string text;  // the element's own character data, concatenated
    std::vector<xml_element> children;
};

class xml_reader {
public:
    xml_reader(std::string_view s, std::string_view source) : s_(s), source_(source) {}

    result<xml_element> document() {
        H2OKV_RETURN_IF_ERROR(skip_misc());
        if (!at("<")) return error("expected the root element");
        xml_element root;
        H2OKV_RETURN_IF_ERROR(element(root, 0));
        H2OKV_RETURN_IF_ERROR(skip_misc());
        if (pos_ < s_.size()) return error("unexpected content after the root element");
        return root;
    }

private:
    static constexpr int max_depth = 32;

    status error(std::string_view what) const {
        int64_t line = 1;
        for (size_t i = 0; i < std::min(pos_, s_.size()); ++i) line += s_[i] == '\n';
        if (depth_ >= 1) return invalid_file("{}: item {}: line {}: {}", source_, item_, line, what);
        return invalid_file("{}: line {}: {}", source_, line, what);
    }
    bool at(std::string_view t) const { return s_.substr(pos_, t.size()) == t; }
    void skip_space() {
        while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
    }
    // Moves past `end`; false when it never comes.
    bool skip_past(std::string_view end) {
        const size_t e = s_.find(end, pos_);
        if (e == std::string_view::npos) return false;
        pos_ = e + end.size();
        return true;
    }

    status skip_misc() {
        for (;;) {
            skip_space();
            if (at("<?")) {
                if (!skip_past("?>")) return error("unterminated processing instruction");
            } else if (at("<!--")) {
                if (!skip_past("-->")) return error("unterminated comment");
            } else if (at("<!DOCTYPE")) {
                int brackets = 0;
                for (; pos_ < s_.size(); ++pos_) {
                    if (s_[pos_] == '[') ++brackets;
                    if (s_[pos_] == ']') --brackets;
                    if (s_[pos_] == '>' && brackets <= 0) break;
                }
                if (pos_ >= s_.size()) return error("unterminated DOCTYPE");
                ++pos_;
            } else {
                return ok_status();
            }
        }
    }

    static bool name_char(char c) {
        return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.' ||
               c == ':' || (static_cast<unsigned char>(c) & 0x80) != 0;
    }
    result<std::string> name() {
        const size_t b = pos_;
        while (pos_ < s_.size() && name_char(s_[pos_])) ++pos_;
        if (pos_ == b) return error("expected a name");
        return std::string(s_.substr(b, pos_ - b));
    }

    // Decodes the entities of raw text into `out`.
    status decode(std::string_view raw, std::string& out) const {
        for (size_t i = 0; i < raw.size(); ++i) {
            if (raw[i] != '&') {
                out += raw[i];
                continue;
            }
            const size_t semi = raw.find(';', i);
            if (semi == std::string_view::npos || semi - i > 12)
                return error("unterminated entity reference");
            const std::string_view ent = raw.substr(i + 1, semi - i - 1);
            static const std::map<std::string_view, char> named = {
                {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
            if (auto it = named.find(ent); it != named.end()) {
                out += it->second;
            } else if (ent.size() >= 2 && ent[0] == '#') {
                const bool hex = ent[1] == 'x' || ent[1] == 'X';
                const std::string_view digits = ent.substr(hex ? 2 : 1);
                uint32_t cp = 0;
                if (digits.empty()) return error(fmt::format("invalid character reference '&{};'", ent));
                for (char c : digits) {
                    int v = -1;
                    if (c >= '0' && c <= '9') v = c - '0';
                    if (hex && c >= 'a' && c <= 'f') v = c - 'a' + 10;
                    if (hex && c >= 'A' && c <= 'F') v = c - 'A' + 10;
                    if (v < 0 || cp > 0x10FFFF) {
                        return error(fmt::format("invalid character reference '&{};'", ent));
                    }
                    cp = cp * (hex ? 16 : 10) + static_cast<uint32_t>(v);
                }
                if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
                    return error(fmt::format("character reference '&{};' is not a character", ent));
                }
                append_utf8(out, cp);
            } else {
                return error(
                    fmt::format("unknown entity '&{};', expected amp, lt, gt, quot, apos or #N", ent));
            }
            i = semi;
        }
        return ok_status();
    }

    // At '<' of a start tag.
    status element(xml_element& e, int depth) {
        if (depth > max_depth) return error(fmt::format("elements nested deeper than {}", max_depth));
        if (depth == 1) ++item_;
        depth_ = depth;
        const status st = element_body(e, depth);
        depth_ = depth - 1;
        return st;
    }
    status element_body(xml_element& e, int depth) {
        ++pos_;
        H2OKV_ASSIGN_OR_RETURN(e.name, name());
        for (;;) {
            skip_space();
            if (at("/>")) {
                pos_ += 2;
                return ok_status();
            }
            if (at(">")) {
                ++pos_;
                break;
            }
            H2OKV_ASSIGN_OR_RETURN(std::string key, name());
            skip_space();
            if (!at("=")) return error(fmt::format("attribute '{}' of <{}> has no value", key, e.name));
            ++pos_;
            skip_space();
            if (pos_ >= s_.size() || (s_[pos_] != '"' && s_[pos_] != '\'')) {
                return error(fmt::format("attribute '{}' of <{}>: expected a quoted value", key, e.name));
            }
            const char q = s_[pos_++];
            const size_t end = s_.find(q, pos_);
            if (end == std::string_view::npos) return error("unterminated attribute value");
            std::string value;
            H2OKV_RETURN_IF_ERROR(decode(s_.substr(pos_, end - pos_), value));
            pos_ = end + 1;
            if (!e.attrs.emplace(key, std::move(value)).second) {
                return error(fmt::format("attribute '{}' of <{}> given twice", key, e.name));
            }
        }
        for (;;) {
            const size_t lt = s_.find('<', pos_);
            if (lt == std::string_view::npos) return error(fmt::format("<{}> is never closed", e.name));
            H2OKV_RETURN_IF_ERROR(decode(s_.substr(pos_, lt - pos_), e.text));
            pos_ = lt;
            if (at("</")) {
                pos_ += 2;
                H2OKV_ASSIGN_OR_RETURN(std::string closing, name());
                if (closing != e.name) {
                    return error(fmt::format("</{}> closes <{}>", closing, e.name));
                }
                skip_space();
                if (!at(">")) return error(fmt::format("expected '>' after </{}", closing));
                ++pos_;
                return ok_status();
            }
            if (at("<!--")) {
                if (!skip_past("-->")) return error("unterminated comment");
            } else if (at("<![CDATA[")) {
                pos_ += 9;
                const size_t end = s_.find("]]>", pos_);
                if (end == std::string_view::npos) return error("unterminated CDATA section");
                e.text += s_.substr(pos_, end - pos_);
                pos_ = end + 3;
            } else if (at("<?")) {
                if (!skip_past("?>")) return error("unterminated processing instruction");
            } else {
                e.children.emplace_back();
                H2OKV_RETURN_IF_ERROR(element(e.children.back(), depth + 1));
            }
        }
    }

    std::string_view s_;
    std::string_view source_;
    size_t pos_ = 0;
    int64_t item_ = -1;  // index of the last child of the root begun, for errors
    int depth_ = 0;      // of the element being read: errors name the item when >= 1
};

result<std::string> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return io_error("cannot open '{}' for reading", path);
    std::stringstream ss;
    ss << in.rdbuf();
    if (in.bad()) return io_error("error reading '{}'", path);
    return ss.str();
}

// LLM-Adapters instructions.

bool starts_with(std::string_view s, std::string_view p) {
    return s.substr(0, p.size()) == p;
}

std::vector<std::string> split(std::string_view s, char sep) {
    std::vector<std::string> out;
    for (;;) {
        const size_t p = s.find(sep);
        out.emplace_back(trim(s.substr(0, p)));
        if (p == std::string_view::npos) return out;
        s.remove_prefix(p + 1);
    }
}

// "answer3" -> ("answer", 3); nullopt unless letters then a positive number.
std::optional<std::pair<std::string, int>> word_number(std::string_view s) {
    size_t i = 0;
    while (i < s.size() && std::isalpha(static_cast<unsigned char>(s[i]))) ++i;
    if (i == 0 || i == s.size() || s.size() - i > 3) return std::nullopt;
    int n = 0;
    for (size_t j = i; j < s.size(); ++j) {
        if (!std::isdigit(static_cast<unsigned char>(s[j]))) return std::nullopt;
        n = n * 10 + (s[j] - '0');
    }
    if (n < 1) return std::nullopt;
    return std::make_pair(std::string(s.substr(0, i)), n);
}

// Options labelled in the text: "Answer1: a Answer2: b" with labels answer1/answer2; the markers are the
// labels with their first letter capitalised, found in order.
status labelled_options(std::string_view body, const std::vector<std::string>& labels, choice_question& q) {
    std::vector<size_t> starts, ends;
    size_t from = 0;
    for (const auto& label : labels) {
        std::string marker = label + ": ";
        marker[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(marker[0])));
        const size_t p = body.find(marker, from);
        if (p == std::string_view::npos) {
            return invalid_argument("the instruction has no '{}' after the question (answer format {})",
                                    marker, fmt::join(labels, "/"));
        }
        starts.push_back(p);
        ends.push_back(p + marker.size());
        from = p + marker.size();
    }
    q.question = trim(body.substr(0, starts[0]));
    for (size_t k = 0; k < labels.size(); ++k) {
        const size_t stop = k + 1 < labels.size() ? starts[k + 1] : body.size();
        std::string_view opt = trim(body.substr(ends[k], stop - ends[k]));
        if (opt.empty()) return invalid_argument("option '{}' is empty", labels[k]);
        q.options.emplace_back(opt);
    }
    return ok_status();
}

// A MathQA option "B ) 27.675" (a few repeat their label: "B ) B ) 6 inches").
status mathqa_option(std::string_view text, char letter, choice_question& q) {
    const std::string label = fmt::format("{} ) ", letter);
    text = trim(text);
    if (!starts_with(text, label)) return invalid_argument("expected option '{}' at '{}'", label, text);
    text.remove_prefix(label.size());
    if (starts_with(text, label)) text.remove_prefix(label.size());
    text = trim(text);
    if (text.empty()) return invalid_argument("option {} is empty", letter);
    q.options.emplace_back(text);
    q.labels.emplace_back(1, letter);
    return ok_status();
}

// MathQA: "{problem} The options: A ) x , B ) y , ..." or, for some items, a Python list literal
// "['A ) x', 'B ) y', ...]".
status mathqa_options(std::string_view text, choice_question& q) {
    const std::string_view key = "The options:";
    const size_t k = text.rfind(key);
    q.question = trim(text.substr(0, k));
    std::string_view rest = trim(text.substr(k + key.size()));
    if (starts_with(rest, "[")) {
        if (rest.back() != ']')
            return invalid_argument("an option list that starts with '[' must end with ']'");
        rest = trim(rest.substr(1, rest.size() - 2));
        for (char letter = 'A'; !rest.empty(); ++letter) {
            if (letter > 'Z') return invalid_argument("more than 26 options");
            const char quote = rest[0];
            if (quote != '\'' && quote != '"')
                return invalid_argument("expected a quoted option at '{}'", rest);
            std::string value;
            size_t i = 1;
            for (; i < rest.size() && rest[i] != quote; ++i) {
                if (rest[i] == '\\' && i + 1 < rest.size()) ++i;
                value += rest[i];
            }
            if (i >= rest.size()) return invalid_argument("unterminated option {}", letter);
            H2OKV_RETURN_IF_ERROR(mathqa_option(value, letter, q));
            rest = trim(rest.substr(i + 1));
            if (starts_with(rest, ",")) rest = trim(rest.substr(1));
        }
    } else {
        for (char letter = 'A'; letter <= 'Z'; ++letter) {
            const std::string next = fmt::format(" , {} ) ", static_cast<char>(letter + 1));
            const size_t p = rest.find(next);
            H2OKV_RETURN_IF_ERROR(mathqa_option(rest.substr(0, p), letter, q));
            if (p == std::string_view::npos) break;
            rest.remove_prefix(p + 3);  // keep "B ) "
        }
    }
    if (q.options.size() < 2) return invalid_argument("{} option(s), expected at least 2", q.options.size());
    return ok_status();
}

status parse_instruction(std::string_view text, const std::string& answer, choice_question& q) {
    const std::string_view fmt_key = "Answer format:";
    const size_t f = text.rfind(fmt_key);
    if (f == std::string_view::npos) {
        if (text.find("The options:") == std::string_view::npos) {
            return invalid_argument("the instruction has neither '{}' nor 'The options:'", fmt_key);
        }
        H2OKV_RETURN_IF_ERROR(mathqa_options(text, q));
    } else {
        q.labels = split(text.substr(f + fmt_key.size()), '/');
        if (q.labels.size() < 2) {
            return invalid_argument("answer format '{}' lists {} label(s), expected at least 2",
                                    trim(text.substr(f + fmt_key.size())), q.labels.size());
        }
        // The question starts after the header "Please choose ...: ".
        const size_t h = text.find(": ");
        if (h == std::string_view::npos || h > f)
            return invalid_argument("the instruction has no ': ' header");
        const std::string_view body = text.substr(h + 2, f - h - 2);
        // Numbered labels of one word ("answer1/answer2/...") name markers in the text; others are the
        // options.
        const auto first = word_number(q.labels[0]);
        bool numbered = first.has_value();
        for (size_t i = 0; numbered && i < q.labels.size(); ++i) {
            const auto wn = word_number(q.labels[i]);
            numbered = wn && wn->first == first->first && wn->second == static_cast<int>(i + 1);
        }
        if (numbered) {
            H2OKV_RETURN_IF_ERROR(labelled_options(body, q.labels, q));
        } else {
            q.question = trim(body);
            q.options = q.labels;
        }
    }
    if (q.question.empty()) return invalid_argument("the question is empty");
    for (size_t i = 0; i < q.labels.size(); ++i) {
        if (q.labels[i] == answer) {
            q.gold = static_cast<int>(i);
            return ok_status();
        }
    }
    return invalid_argument("answer '{}' is none of {}", answer, fmt::join(q.labels, "/"));
}

// Tasks and their prompts.

struct task_def {
    std::string_view name;
    std::string_view folder;  // under llm-adapters-commonsense/ (empty for COPA)
};
constexpr task_def task_defs[] = {
    {"copa", ""},
    {"piqa", "piqa"},
    {"openbookqa", "openbookqa"},
    {"winogrande", "winogrande"},
    {"arc-easy", "ARC-Easy"},
    {"arc-challenge", "ARC-Challenge"},
    {"boolq", "boolq"},
    {"siqa", "social_i_qa"},
    {"mathqa", "mathqa"},
};

result<const task_def*> find_task(std::string_view task) {
    for (const auto& d : task_defs) {
        if (d.name == task) return &d;
    }
    return invalid_argument("unknown task '{}', expected one of {}", task, fmt::join(task_names(), ", "));
}

std::string lower_first(std::string_view s) {
    std::string out(s);
    if (!out.empty()) out[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(out[0])));
    return out;
}

task_item copa_to_item(const copa_item& c) {
    std::string_view premise = trim(c.premise);
    if (!premise.empty() && premise.back() == '.') premise.remove_suffix(1);
    const std::string context = fmt::format("{} {}", premise, c.asks_for_cause ? "because" : "therefore");
    task_item it;
    it.id = std::to_string(c.id);
    it.gold = c.gold;
    for (const auto* alt : {&c.alternative1, &c.alternative2}) {
        it.choices.push_back({context, " " + lower_first(trim(*alt))});
    }
    return it;
}

result<task_item> question_to_item(std::string_view task, const choice_question& q) {
    task_item it;
    it.gold = q.gold;
    auto same_context = [&](const std::string& context) {
        for (const auto& o : q.options) it.choices.push_back({context, " " + o});
    };
    if (task == "openbookqa") {
        same_context(q.question);
    } else if (task == "siqa") {
        same_context(fmt::format("Q: {}\nA:", q.question));
    } else if (task == "boolq") {
        if (q.labels != std::vector<std::string>{"true", "false"}) {
            return invalid_argument("boolq answer format {}, expected true/false", fmt::join(q.labels, "/"));
        }
        const std::string context = fmt::format("Question: {}\nAnswer:", q.question);
        it.choices = {{context, " no"}, {context, " yes"}};
        it.gold = q.gold == 0 ? 1 : 0;
    } else if (task == "winogrande") {
        const size_t blank = q.question.find('_');
        if (blank == std::string::npos) return invalid_argument("the sentence has no blank '_'");
        const std::string rest(trim(std::string_view(q.question).substr(blank + 1)));
        for (const auto& o : q.options) it.choices.push_back({q.question.substr(0, blank) + o, " " + rest});
    } else {  // piqa, arc-*, mathqa
        same_context(fmt::format("Question: {}\nAnswer:", q.question));
    }
    return it;
}

}  // namespace

result<std::vector<copa_item>> parse_copa_xml(std::string_view xml, std::string_view source) {
    xml_reader reader(xml, source);
    H2OKV_ASSIGN_OR_RETURN(xml_element root, reader.document());
    if (root.name != "copa-corpus") {
        return invalid_file("{}: root element <{}>, expected <copa-corpus>", source, root.name);
    }
    std::vector<copa_item> items;
    for (size_t i = 0; i < root.children.size(); ++i) {
        const xml_element& e = root.children[i];
        auto bad = [&](std::string_view what) { return invalid_file("{}: item {}: {}", source, i, what); };
        if (e.name != "item") return bad(fmt::format("element <{}>, expected <item>", e.name));
        auto attr = [&](const char* key) -> const std::string* {
            auto it = e.attrs.find(key);
            return it == e.attrs.end() ? nullptr : &it->second;
        };
        copa_item c;
        const std::string* id = attr("id");
        const std::string* asks = attr("asks-for");
        const std::string* gold = attr("most-plausible-alternative");
        if (!id || !asks || !gold) {
            return bad("<item> lacks one of the attributes id, asks-for, most-plausible-alternative");
        }
        if (id->empty() || id->size() > 12 || id->find_first_not_of("0123456789") != std::string::npos) {
            return bad(fmt::format("id '{}' is not a number", *id));
        }
        c.id = std::stoll(*id);
        if (*asks != "cause" && *asks != "effect") {
            return bad(fmt::format("asks-for '{}', expected cause or effect", *asks));
        }
        c.asks_for_cause = *asks == "cause";
        if (*gold != "1" && *gold != "2") {
            return bad(fmt::format("most-plausible-alternative '{}', expected 1 or 2", *gold));
        }
        c.gold = *gold == "1" ? 0 : 1;
        std::map<std::string_view, std::string*> fields = {
            {"p", &c.premise}, {"a1", &c.alternative1}, {"a2", &c.alternative2}};
        std::map<std::string_view, int> seen;
        for (const auto& child : e.children) {
            auto f = fields.find(child.name);
            if (f == fields.end())
                return bad(fmt::format("element <{}>, expected <p>, <a1> or <a2>", child.name));
            if (++seen[child.name] > 1) return bad(fmt::format("<{}> given twice", child.name));
            if (!child.children.empty()) return bad(fmt::format("<{}> holds elements", child.name));
            *f->second = trim(child.text);
            if (f->second->empty()) return bad(fmt::format("<{}> is empty", child.name));
        }
        if (seen.size() != 3) return bad("expected <p>, <a1> and <a2>");
        items.push_back(std::move(c));
    }
    if (items.empty()) return invalid_file("{}: no <item>", source);
    return items;
}

result<std::vector<choice_question>> parse_commonsense_json(std::string_view json, std::string_view source) {
    nlohmann::json doc;
    try {
        doc = nlohmann::json::parse(json.begin(), json.end());
    } catch (const nlohmann::json::exception& e) {
        return invalid_file("{}: {}", source, e.what());
    }
    if (!doc.is_array()) return invalid_file("{}: expected a JSON array of items", source);
    std::vector<choice_question> out;
    out.reserve(doc.size());
    for (size_t i = 0; i < doc.size(); ++i) {
        const auto& x = doc[i];
        auto string_field = [&](const char* key) -> const std::string* {
            if (!x.is_object()) return nullptr;
            auto it = x.find(key);
            if (it == x.end() || !it->is_string()) return nullptr;
            return &it->get_ref<const std::string&>();
        };
        const std::string* instruction = string_field("instruction");
        const std::string* answer = string_field("answer");
        if (!instruction || !answer) {
            return invalid_file(
                "{}: item {}: expected an object with string fields 'instruction' and 'answer'", source, i);
        }
        choice_question q;
        const status st = parse_instruction(*instruction, std::string(trim(*answer)), q);
        if (!st.ok()) return invalid_file("{}: item {}: {}", source, i, st.message());
        out.push_back(std::move(q));
    }
    if (out.empty()) return invalid_file("{}: no items", source);
    return out;
}

std::vector<std::string> task_names() {
    std::vector<std::string> names;
    for (const auto& d : task_defs) names.emplace_back(d.name);
    return names;
}

std::vector<std::string> task_splits(std::string_view task) {
    if (task == "copa") return {"val", "dev", "test", "all"};
    return {"test"};
}

result<std::string> task_file(std::string_view task, std::string_view split) {
    H2OKV_ASSIGN_OR_RETURN(const task_def* d, find_task(task));
    const auto splits = task_splits(task);
    if (split.empty()) split = splits.front();
    if (std::find(splits.begin(), splits.end(), split) == splits.end()) {
        return invalid_argument("task {} has no split '{}', expected one of {}", task, split,
                                fmt::join(splits, ", "));
    }
    if (task == "copa") return fmt::format("copa/copa-{}.xml", split == "val" ? "dev" : split);
    return fmt::format("llm-adapters-commonsense/{}/test.json", d->folder);
}

result<task_set> load_task(std::string_view task, const std::string& data_dir, std::string_view split) {
    H2OKV_ASSIGN_OR_RETURN(std::string rel, task_file(task, split));
    task_set set;
    set.task = task;
    set.split = split.empty() ? task_splits(task).front() : std::string(split);
    set.path = data_dir + "/" + rel;
    H2OKV_ASSIGN_OR_RETURN(std::string text, read_file(set.path));
    if (task == "copa") {
        H2OKV_ASSIGN_OR_RETURN(auto raw, parse_copa_xml(text, set.path));
        // Under "val" only dev items 401-500 are evaluated, but the whole dev file is the few-shot pool.
        for (const auto& c : raw) {
            if (set.split != "val" || (c.id >= 401 && c.id <= 500)) set.eval.push_back(set.items.size());
            set.items.push_back(copa_to_item(c));
        }
        if (set.split == "val" && set.eval.size() != 100) {
            return invalid_file("{}: {} items with ids 401-500 (the val split), expected 100", set.path,
                                set.eval.size());
        }
        return set;
    }
    H2OKV_ASSIGN_OR_RETURN(auto raw, parse_commonsense_json(text, set.path));
    for (size_t i = 0; i < raw.size(); ++i) {
        auto it = question_to_item(task, raw[i]);
        if (!it.ok()) return invalid_file("{}: item {}: {}", set.path, i, it.error().message());
        it->id = std::to_string(i);
        set.eval.push_back(i);
        set.items.push_back(std::move(it).value());
    }
    return set;
}

}  // namespace h2okv::eval

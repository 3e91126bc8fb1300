// driver.cpp feeds JSON Schemas, one per input line, to the converter Ollama
// runs on a request's `format` (llama.cpp's json_schema_to_grammar, compiled
// from the ollama module's own sources) and answers one line per schema:
// "ok <grammar bytes>" or "error <what the converter threw, on one line>".
// One process serves a whole corpus, so a test pays the start-up once.
#include "json-schema-to-grammar.h"

#include <nlohmann/json.hpp>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

// The converter borrows these from llama.cpp's common library, which the
// driver does not build; they behave as common.cpp's do.
std::string string_join(const std::vector<std::string> & parts, const std::string & sep) {
    std::ostringstream out;
    for (size_t i = 0; i < parts.size(); i++) {
        if (i > 0) {
            out << sep;
        }
        out << parts[i];
    }
    return out.str();
}

std::vector<std::string> string_split(const std::string & s, const std::string & sep) {
    std::vector<std::string> parts;
    size_t from = 0;
    for (size_t at = s.find(sep); at != std::string::npos; at = s.find(sep, from)) {
        parts.push_back(s.substr(from, at - from));
        from = at + sep.size();
    }
    parts.push_back(s.substr(from));
    return parts;
}

std::string string_repeat(const std::string & s, size_t n) {
    std::string out;
    out.reserve(s.size() * n);
    while (n-- > 0) {
        out += s;
    }
    return out;
}

static std::string one_line(std::string s) {
    for (auto & c : s) {
        if (c == '\n' || c == '\r') {
            c = ' ';
        }
    }
    return s;
}

int main() {
    std::ios::sync_with_stdio(false);
    std::string line;
    while (std::getline(std::cin, line)) {
        // Ollama's schema_to_grammar catches every std::exception the same
        // way and refuses the request: so does the driver.
        try {
            auto schema = nlohmann::ordered_json::parse(line);
            std::string grammar = json_schema_to_grammar(schema);
            std::cout << "ok " << grammar.size() << "\n";
        } catch (const std::exception & e) {
            std::cout << "error " << one_line(e.what()) << "\n";
        }
        std::cout.flush();
    }
    return 0;
}

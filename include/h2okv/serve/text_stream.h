// The text of a generation as it may be sent: token bytes in, text out, with the stop strings cut away and
// every piece valid UTF-8. A token may end inside a character (byte tokens) and the text may be the start
// of a stop string, so the stream holds such a tail back until the next token decides it. What take()
// returns is final: the pieces of a streamed response concatenate to the text of a non-streamed one.
//
//   serve::text_stream ts({"\n\n"});
//   for each sampled id: { bool stop = ts.push(tok.piece(id)); send(ts.take()); if (stop) break; }
//   send(ts.finish());
//
// Malformed UTF-8 in the token bytes becomes U+FFFD, one per byte that starts no well-formed character.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace h2okv::serve {

class text_stream {
public:
    explicit text_stream(std::vector<std::string> stops = {});

    // Adds the bytes of the next token. True once a stop string is complete: the text ends before it and
    // later bytes are ignored.
    bool push(std::string_view bytes);
    // The text that became final since the last take() or finish().
    std::string take();
    // The rest, at the end of the generation (an unfinished character becomes U+FFFD).
    std::string finish();

    bool stopped() const { return stopped_; }

private:
    std::vector<std::string> stops_;
    std::string pending_;  // bytes not yet returned
    bool stopped_ = false;
};

// `bytes` with every byte that starts no well-formed UTF-8 character replaced by U+FFFD.
std::string sanitize_utf8(std::string_view bytes);

}  // namespace h2okv::serve

// The C++ side of model/tokenizer.h: SentencePieceProcessor behind extern "C" functions.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

extern "C" {
#include "tokenizer.h"
}

struct tokenizer {
    sentencepiece::SentencePieceProcessor sp;
    bool split; // long texts may be encoded in pieces (split_safe)
    int bos, eos; // read once at load: protobuf fills the default piece names lazily, behind
                  // synchronization ThreadSanitizer cannot see in an uninstrumented library
};

// SentencePiece's encoding takes superlinear time in the text's length (a 33K-token prompt: 0.14 s
// whole, 0.06 s in pieces of 4K tokens) and one core. So a long text is cut into pieces at spaces
// that follow a printable ASCII character (one no normalizer turns into a space), and the pieces
// are encoded in parallel. A later piece is encoded without the cut's space: the dummy prefix
// SentencePiece adds gives back its mark (U+2581). The ids are the whole text's when no vocabulary
// piece has the mark after another character: then no piece spans a cut, and SentencePiece's
// merges (BPE) or segmentation (unigram) on either side of it are independent.
static const char space_mark[] = "\xE2\x96\x81";
static const size_t split_min = 16384, split_piece = 8192; // bytes: whole below split_min

static bool split_safe(const sentencepiece::SentencePieceProcessor &sp) {
    for (int id = 0; id < sp.GetPieceSize(); id++) {
        const std::string &piece = sp.IdToPiece(id);
        for (size_t at = piece.find(space_mark, 1); at != std::string::npos; at = piece.find(space_mark, at + 3))
            if (at < 3 || piece.compare(at - 3, 3, space_mark)) return false;
    }
    // The dummy prefix must be on and the normalizer must leave the cut's neighbourhood alone.
    std::vector<int> whole, a, b;
    return sp.Encode("Once upon a time", &whole).ok() && sp.Encode("Once upon", &a).ok() &&
           sp.Encode("a time", &b).ok() && (a.insert(a.end(), b.begin(), b.end()), a == whole);
}

// The ends of the pieces of text [0, len): piece i is [start_i, end_i), start_{i+1} = end_i + 1
// (the cut's space is left out).
static std::vector<size_t> cuts(const char *text, size_t len) {
    std::vector<size_t> ends;
    for (size_t at = split_piece; at + split_piece / 2 < len; at++)
        if (text[at] == ' ' && text[at - 1] > ' ' && text[at - 1] < 127) {
            ends.push_back(at);
            at += split_piece;
        }
    ends.push_back(len);
    return ends;
}

static char *dup_string(const std::string &s) {
    char *out = static_cast<char *>(burst_malloc(s.size() + 1));
    memcpy(out, s.data(), s.size());
    out[s.size()] = 0;
    return out;
}

extern "C" burst_status tokenizer_load(const char *path, tokenizer **out, burst_error *err) {
    *out = nullptr;
    tokenizer *t = new tokenizer;
    auto status = t->sp.Load(path);
    if (!status.ok()) {
        burst_status st = BURST_FAIL(err, BURST_ERR_IO, "%s: cannot load SentencePiece model (%s)",
                                     path, status.ToString().c_str());
        delete t;
        return st;
    }
    t->split = split_safe(t->sp);
    t->bos = t->sp.bos_id(), t->eos = t->sp.eos_id();
    *out = t;
    return BURST_OK;
}

extern "C" void tokenizer_free(tokenizer *t) { delete t; }
extern "C" int tokenizer_vocab_size(const tokenizer *t) { return t->sp.GetPieceSize(); }
extern "C" int tokenizer_bos(const tokenizer *t) { return t->bos; }
extern "C" int tokenizer_eos(const tokenizer *t) { return t->eos; }

extern "C" burst_status tokenizer_encode(const tokenizer *t, const char *text, int add_bos,
                                         int **ids, int *n, burst_error *err) {
    size_t len = strlen(text);
    std::vector<size_t> ends = t->split && len >= split_min ? cuts(text, len) : std::vector<size_t>{len};
    size_t n_pieces = ends.size();
    std::vector<std::vector<int>> v(n_pieces);
    std::vector<sentencepiece::util::Status> status(n_pieces);
    std::atomic<size_t> next{0};
    auto encode = [&] {
        for (size_t i; (i = next++) < n_pieces;) {
            size_t start = i ? ends[i - 1] + 1 : 0;
            status[i] = t->sp.Encode(std::string_view(text + start, ends[i] - start), &v[i]);
        }
    };
    size_t n_threads = std::min<size_t>({n_pieces, std::max(1u, std::thread::hardware_concurrency()), 16});
    std::vector<std::thread> threads;
    try {
        for (size_t k = 1; k < n_threads; k++) threads.emplace_back(encode);
    } catch (const std::system_error &) { // no thread to be had: the threads there are take its pieces
    }
    encode();
    for (auto &th : threads) th.join();
    size_t total = add_bos ? 1 : 0;
    for (size_t i = 0; i < n_pieces; i++) {
        if (!status[i].ok())
            return BURST_FAIL(err, BURST_ERR_INVALID, "encode failed: %s", status[i].ToString().c_str());
        total += v[i].size();
    }
    *n = (int)total;
    *ids = static_cast<int *>(burst_malloc(sizeof(int) * (total ? total : 1)));
    int *at = *ids;
    if (add_bos) *at++ = t->bos;
    for (const auto &piece : v) at = std::copy(piece.begin(), piece.end(), at);
    return BURST_OK;
}

extern "C" char *tokenizer_decode(const tokenizer *t, const int *ids, int n) {
    int vocab = t->sp.GetPieceSize();
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab) return nullptr;
    std::string text;
    auto status = t->sp.Decode(std::vector<int>(ids, ids + n), &text);
    return status.ok() ? dup_string(text) : nullptr;
}

extern "C" int tokenizer_is_text(const tokenizer *t, int id) {
    return id >= 0 && id < t->sp.GetPieceSize() && !t->sp.IsControl(id) && !t->sp.IsUnknown(id) && !t->sp.IsUnused(id);
}

extern "C" char *tokenizer_piece(const tokenizer *t, int id, int *byte) {
    *byte = -1;
    if (id < 0 || id >= t->sp.GetPieceSize()) return nullptr;
    std::string piece = t->sp.IdToPiece(id);
    if (t->sp.IsByte(id)) *byte = (int)strtol(piece.c_str() + 3, nullptr, 16); // "<0xNN>"
    else
        for (size_t at; (at = piece.find("\xE2\x96\x81")) != std::string::npos;) piece.replace(at, 3, " ");
    return dup_string(piece);
}

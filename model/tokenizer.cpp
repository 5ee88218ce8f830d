// The C++ side of model/tokenizer.h: SentencePieceProcessor behind extern "C" functions.
#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "tokenizer.h"
}

struct tokenizer {
    sentencepiece::SentencePieceProcessor sp;
};

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
    *out = t;
    return BURST_OK;
}

extern "C" void tokenizer_free(tokenizer *t) { delete t; }
extern "C" int tokenizer_vocab_size(const tokenizer *t) { return t->sp.GetPieceSize(); }
extern "C" int tokenizer_bos(const tokenizer *t) { return t->sp.bos_id(); }
extern "C" int tokenizer_eos(const tokenizer *t) { return t->sp.eos_id(); }

extern "C" burst_status tokenizer_encode(const tokenizer *t, const char *text, int add_bos,
                                         int **ids, int *n, burst_error *err) {
    std::vector<int> v;
    auto status = t->sp.Encode(text, &v);
    if (!status.ok())
        return BURST_FAIL(err, BURST_ERR_INVALID, "encode failed: %s", status.ToString().c_str());
    int bos = add_bos ? 1 : 0;
    *n = (int)v.size() + bos;
    *ids = static_cast<int *>(burst_malloc(sizeof(int) * (size_t)*n));
    if (bos) (*ids)[0] = t->sp.bos_id();
    if (!v.empty()) memcpy(*ids + bos, v.data(), sizeof(int) * v.size());
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

extern "C" char *tokenizer_piece(const tokenizer *t, int id, int *byte) {
    *byte = -1;
    if (id < 0 || id >= t->sp.GetPieceSize()) return nullptr;
    std::string piece = t->sp.IdToPiece(id);
    if (t->sp.IsByte(id)) *byte = (int)strtol(piece.c_str() + 3, nullptr, 16); // "<0xNN>"
    else
        for (size_t at; (at = piece.find("\xE2\x96\x81")) != std::string::npos;) piece.replace(at, 3, " ");
    return dup_string(piece);
}

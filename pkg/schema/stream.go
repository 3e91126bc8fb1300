package schema

import (
	"fmt"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// StreamReader follows a reply while the model is still writing it, so the
// user can watch the thought and the answer grow. It is a small state machine
// over the JSON text: it decodes only the strings the preview needs and keeps
// only its state plus the text not yet taken. It does not validate: the whole
// reply still goes through Decode, which may refuse what was previewed.
//
// Feed it the reply in pieces split anywhere; after each, ask Action,
// TakeThought and TakeAnswer. Err says the preview must stop. The zero value
// is ready to use; a StreamReader is not safe for concurrent use.
type StreamReader struct {
	st    state
	stack []byte // '{' or '[' for each open container: the depth is its length
	n     int    // bytes fed so far: the offset of the byte being read
	err   error

	// Inside a string.
	sink  sink     // where its decoded text goes
	isKey bool     // whether it is an object key
	esc   escState // how far into an escape
	hex   int      // hex digits read of the current \u escape
	u, hi rune     // that escape's value; a high surrogate waiting for its low half
	utf   [utf8.UTFMax]byte
	nutf  int // bytes of a character not complete yet, in utf
	num   numState
	lit   string // the rest of true, false or null

	// What the bytes mean: only top-level keys of the object and the keys of
	// its args object count.
	key     [8]byte // a key that may be ours; longer ones are none of ours
	nkey    int
	field   field // the field whose value comes next
	seen    uint8 // fields read (1<<field), to spot a repeated one
	inArgs  bool  // the open object at depth 2 is args
	shown   bool  // something was previewed: a broken object is now an error
	bracket bool  // the last non-space character of the prose is '['

	// The preview.
	action      []byte
	actionName  string
	actionKnown bool
	thought     []byte // decoded and not yet taken
	answer      []byte // decoded and not yet taken; held until the action is known

	// Skipping a {...} span that is not JSON, exactly as objectSpans does.
	skipDepth        int
	skipStr, skipEsc bool

	start, end int // the object's offsets in the reply, once Done
}

type state uint8

const (
	sProse      state = iota // before the object: looking for '{'
	sSkip                    // in a broken {...} span, counting braces
	sKeyOrEnd                // after '{'
	sKey                     // after ',' in an object
	sColon                   // after a key
	sValue                   // after ':', or ',' in an array
	sValueOrEnd              // after '['
	sAfter                   // after a value: ',' or the container's end
	sString
	sNumber
	sLiteral
	sDone   // the object is closed; the rest of the reply is not read
	sFailed // see err
)

type sink uint8

const (
	sinkNone sink = iota
	sinkKey
	sinkThought
	sinkAction
	sinkAnswer
)

type field uint8

const (
	fOther field = iota
	fThought
	fAction
	fArgs
	fAnswer
)

type escState uint8

const (
	escNone     escState = iota
	escSlash             // after '\'
	escHex               // in \uXXXX
	escLow               // after a high surrogate: its low half may follow
	escLowSlash          // ... and its '\'
	escLowHex            // ... in its \uXXXX
)

type numState uint8

const (
	numMinus numState = iota // '-': a digit must follow
	numZero                  // a leading 0: no more digits
	numInt
	numDot // '.': a digit must follow
	numFrac
	numE     // 'e': a sign or digit must follow
	numESign // a digit must follow
	numExp
)

// maxDepth is encoding/json's nesting limit: deeper is not JSON to Decode.
const maxDepth = 10000

// NewStreamReader returns a reader at the start of a reply.
func NewStreamReader() *StreamReader { return &StreamReader{} }

// Feed reads the next piece of the reply. Pieces may split the text anywhere,
// even inside a character or an escape. Once the object is closed, or the
// reader has failed, the rest is ignored.
func (r *StreamReader) Feed(piece string) {
	for i := 0; i < len(piece) && r.st < sDone; i++ {
		if r.n == MaxReplyBytes {
			r.fail(fmt.Errorf("reply: longer than %d bytes, which Decode refuses", MaxReplyBytes))
			return
		}
		r.step(piece[i])
		r.n++
	}
}

// Action returns the action once its whole string value has been read.
func (r *StreamReader) Action() (name string, known bool) {
	return r.actionName, r.actionKnown
}

// TakeThought returns the thought's text decoded since the last call. It never
// ends inside a character: a partial escape or UTF-8 sequence waits.
func (r *StreamReader) TakeThought() string {
	s := string(r.thought)
	r.thought = r.thought[:0]
	return s
}

// TakeAnswer returns the answer's text decoded since the last call, once the
// action is known to be final_response; until then it is held (and dropped if
// the action is another).
func (r *StreamReader) TakeAnswer() string {
	if !r.actionKnown || r.actionName != FinalAction {
		return ""
	}
	s := string(r.answer)
	r.answer = r.answer[:0]
	return s
}

// Done reports whether the object has been read to its closing brace.
func (r *StreamReader) Done() bool { return r.st == sDone }

// Err says why the reader stopped following the reply: the object it was
// previewing turned out not to be JSON, repeated a field it previews (JSON's
// last one would win, and the first was shown), stood in an array, or the
// reply grew past MaxReplyBytes. The caller should stop the preview and wait
// for Decode. Text decoded before the error can still be taken: it was what
// the reply said, as far as it went.
func (r *StreamReader) Err() error { return r.err }

func (r *StreamReader) fail(err error) {
	r.err, r.st = err, sFailed
}

func (r *StreamReader) step(c byte) {
	switch r.st {
	case sProse:
		r.prose(c)
	case sSkip:
		r.skip(c)
	case sString:
		r.str(c)
	case sNumber:
		r.number(c)
	case sLiteral:
		if c != r.lit[0] {
			r.syntax(c, "in a literal")
			return
		}
		if r.lit = r.lit[1:]; r.lit == "" {
			r.st = sAfter
		}
	case sKeyOrEnd, sKey:
		switch {
		case isSpace(c):
		case c == '"':
			r.beginKey()
		case c == '}' && r.st == sKeyOrEnd:
			r.close()
		default:
			r.syntax(c, "where a key should be")
		}
	case sColon:
		switch {
		case isSpace(c):
		case c == ':':
			r.st = sValue
		default:
			r.syntax(c, "after a key")
		}
	case sValue, sValueOrEnd:
		switch {
		case isSpace(c):
		case c == ']' && r.st == sValueOrEnd:
			r.close()
		default:
			r.value(c)
		}
	case sAfter:
		top := r.stack[len(r.stack)-1]
		switch {
		case isSpace(c):
		case c == ',' && top == '{':
			r.st = sKey
		case c == ',':
			r.st = sValue
		case c == '}' && top == '{', c == ']' && top == '[':
			r.close()
		default:
			r.syntax(c, "after a value")
		}
	}
}

// isSpace reports JSON's whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// prose skips the text before the object, as Decode does: a sentence, a
// Markdown fence. Only '{' matters, and whether an array opened right before
// it (Decode refuses an object inside an array).
func (r *StreamReader) prose(c byte) {
	switch {
	case c == '{':
		if r.bracket {
			r.fail(fmt.Errorf("reply: the object at byte %d is inside an array, which Decode refuses", r.n))
			return
		}
		r.nutf, r.start = 0, r.n
		r.stack = append(r.stack[:0], '{')
		r.st = sKeyOrEnd
	case c < utf8.RuneSelf:
		r.nutf = 0
		if c == '[' || !unicode.IsSpace(rune(c)) {
			r.bracket = c == '['
		}
	default: // part of a character: it may be a space, like U+00A0
		r.utf[r.nutf] = c
		r.nutf++
		if utf8.FullRune(r.utf[:r.nutf]) {
			ch, size := utf8.DecodeRune(r.utf[:r.nutf])
			if size != r.nutf || !unicode.IsSpace(ch) {
				r.bracket = false
			}
			r.nutf = 0
		}
	}
}

// skip reads a {...} span that turned out not to be JSON with the rules of
// objectSpans, so that the reader tries the same next object Decode does.
func (r *StreamReader) skip(c byte) {
	switch {
	case r.skipEsc:
		r.skipEsc = false
	case r.skipStr && c == '\\':
		r.skipEsc = true
	case c == '"':
		r.skipStr = !r.skipStr
	case r.skipStr:
	case c == '{':
		r.skipDepth++
	case c == '}':
		if r.skipDepth--; r.skipDepth == 0 {
			r.st, r.bracket = sProse, false
		}
	}
}

// syntax handles a byte that cannot continue the object. Once something was
// previewed that is an error; before, the span is skipped like Decode skips a
// {...} in prose that is not JSON, and the reader looks for the next object.
func (r *StreamReader) syntax(c byte, where string) {
	if r.shown {
		r.fail(fmt.Errorf("reply: not a JSON object: unexpected %q %s at byte %d", c, where, r.n))
		return
	}
	depth := 0
	for _, b := range r.stack {
		if b == '{' {
			depth++
		}
	}
	inStr := r.st == sString
	*r = StreamReader{
		st: sSkip, n: r.n, stack: r.stack[:0],
		skipDepth: depth, skipStr: inStr, skipEsc: inStr && r.esc == escSlash,
	}
	r.skip(c)
}

func (r *StreamReader) push(c byte) bool {
	if len(r.stack) == maxDepth {
		r.syntax(c, "nested too deep")
		return false
	}
	r.stack = append(r.stack, c)
	return true
}

func (r *StreamReader) close() {
	r.stack = r.stack[:len(r.stack)-1]
	switch len(r.stack) {
	case 0:
		r.st, r.end = sDone, r.n+1
		if !r.actionKnown {
			r.answer = nil // no action: the answer is never shown
		}
		return
	case 1:
		r.inArgs = false
	}
	r.st = sAfter
}

// value starts the value of r.field.
func (r *StreamReader) value(c byte) {
	f := r.field
	r.field = fOther
	switch {
	case c == '{':
		if r.push(c) {
			if len(r.stack) == 2 {
				r.inArgs = f == fArgs
			}
			r.st = sKeyOrEnd
		}
	case c == '[':
		if r.push(c) {
			r.st = sValueOrEnd
		}
	case c == '"':
		r.sink = sinkNone
		switch {
		case f == fThought:
			r.sink = sinkThought
		case f == fAction:
			r.sink = sinkAction
		case f == fAnswer && (!r.actionKnown || r.actionName == FinalAction):
			r.sink = sinkAnswer
		}
		r.isKey, r.st = false, sString
	case c == '-':
		r.st, r.num = sNumber, numMinus
	case c == '0':
		r.st, r.num = sNumber, numZero
	case '1' <= c && c <= '9':
		r.st, r.num = sNumber, numInt
	case c == 't':
		r.st, r.lit = sLiteral, "rue"
	case c == 'f':
		r.st, r.lit = sLiteral, "alse"
	case c == 'n':
		r.st, r.lit = sLiteral, "ull"
	default:
		r.syntax(c, "where a value should be")
	}
}

func (r *StreamReader) beginKey() {
	r.sink, r.nkey = sinkNone, 0
	if d := len(r.stack); d == 1 || d == 2 && r.inArgs {
		r.sink = sinkKey
	}
	r.isKey, r.st = true, sString
}

// endKey decides which field the key names.
func (r *StreamReader) endKey() {
	r.st, r.field = sColon, fOther
	if r.sink != sinkKey || r.nkey > len(r.key) {
		return
	}
	name := string(r.key[:r.nkey])
	switch {
	case len(r.stack) == 2 && name == "answer":
		r.field = fAnswer
	case len(r.stack) == 2:
	case name == "thought":
		r.field = fThought
	case name == "action":
		r.field = fAction
	case name == "args":
		r.field = fArgs
	}
	if r.field == fOther {
		return
	}
	if r.seen&(1<<r.field) != 0 {
		r.fail(fmt.Errorf("reply: repeats the field %q at byte %d; the preview stops", name, r.n))
		return
	}
	r.seen |= 1 << r.field
}

func (r *StreamReader) endString() {
	if r.isKey {
		r.endKey()
		return
	}
	if r.sink == sinkAction {
		r.actionName, r.actionKnown, r.shown = string(r.action), true, true
		r.action = nil
		if r.actionName != FinalAction {
			r.answer = nil // it was not the final answer after all
		}
	}
	r.st = sAfter
}

// str reads a byte of a string, decoding escapes as encoding/json does:
// a surrogate escape that is not half of a pair is U+FFFD, and so is each
// byte that is not valid UTF-8.
func (r *StreamReader) str(c byte) {
	switch r.esc {
	case escNone:
		switch {
		case c == '"':
			r.flushUTF()
			r.endString()
		case c == '\\':
			r.flushUTF()
			r.esc = escSlash
		case c < 0x20:
			r.syntax(c, "(a control character) in a string")
		default:
			r.char(c)
		}
	case escSlash:
		if c == 'u' {
			r.esc, r.hex, r.u = escHex, 0, 0
			return
		}
		d, ok := simpleEscapes[c]
		if !ok {
			r.syntax(c, "after a backslash")
			return
		}
		r.esc = escNone
		r.putByte(d)
	case escHex, escLowHex:
		v, ok := unhex(c)
		if !ok {
			r.syntax(c, "in a \\u escape")
			return
		}
		if r.u, r.hex = r.u<<4|v, r.hex+1; r.hex < 4 {
			return
		}
		low := r.esc == escLowHex
		r.esc = escNone
		if low {
			if pair := utf16.DecodeRune(r.hi, r.u); pair != unicode.ReplacementChar {
				r.putRune(pair)
				return
			}
			r.putRune(unicode.ReplacementChar) // the high half alone
		}
		switch {
		case 0xD800 <= r.u && r.u < 0xDC00:
			r.hi, r.esc = r.u, escLow // wait: its low half may follow
		case 0xDC00 <= r.u && r.u < 0xE000:
			r.putRune(unicode.ReplacementChar) // a low half alone
		default:
			r.putRune(r.u)
		}
	case escLow:
		if c == '\\' {
			r.esc = escLowSlash
			return
		}
		r.esc = escNone
		r.putRune(unicode.ReplacementChar)
		r.str(c)
	case escLowSlash:
		if c == 'u' {
			r.esc, r.hex, r.u = escLowHex, 0, 0
			return
		}
		r.esc = escSlash
		r.putRune(unicode.ReplacementChar)
		r.str(c)
	}
}

var simpleEscapes = map[byte]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

func unhex(c byte) (rune, bool) {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0'), true
	case 'a' <= c && c <= 'f':
		return rune(c - 'a' + 10), true
	case 'A' <= c && c <= 'F':
		return rune(c - 'A' + 10), true
	}
	return 0, false
}

// char reads a byte of a string that is not part of an escape, holding back
// a character until all its bytes are there.
func (r *StreamReader) char(c byte) {
	if c < utf8.RuneSelf {
		r.flushUTF()
		r.putByte(c)
		return
	}
	r.utf[r.nutf] = c
	r.nutf++
	for r.nutf > 0 && utf8.FullRune(r.utf[:r.nutf]) {
		ch, size := utf8.DecodeRune(r.utf[:r.nutf]) // U+FFFD for a byte that is not UTF-8
		r.putRune(ch)
		r.nutf = copy(r.utf[:], r.utf[size:r.nutf])
	}
}

// flushUTF ends a character cut short: what is held is the valid start of one,
// and encoding/json turns each such byte into U+FFFD.
func (r *StreamReader) flushUTF() {
	for ; r.nutf > 0; r.nutf-- {
		r.putRune(unicode.ReplacementChar)
	}
}

func (r *StreamReader) putRune(ch rune) {
	var b [utf8.UTFMax]byte
	for _, c := range b[:utf8.EncodeRune(b[:], ch)] {
		r.putByte(c)
	}
}

func (r *StreamReader) putByte(c byte) {
	switch r.sink {
	case sinkKey:
		if r.nkey < len(r.key) {
			r.key[r.nkey] = c
		}
		r.nkey++
	case sinkThought:
		r.thought = append(r.thought, c)
		r.shown = true
	case sinkAction:
		r.action = append(r.action, c)
	case sinkAnswer:
		r.answer = append(r.answer, c)
		r.shown = r.shown || r.actionKnown
	}
}

// number follows JSON's number grammar, so that "01" or "1." end the preview
// as they would end Decode.
func (r *StreamReader) number(c byte) {
	digit := '0' <= c && c <= '9'
	exp := c == 'e' || c == 'E'
	switch {
	case r.num == numMinus && c == '0':
		r.num = numZero
	case (r.num == numMinus || r.num == numInt) && digit:
		r.num = numInt
	case (r.num == numZero || r.num == numInt) && c == '.':
		r.num = numDot
	case (r.num == numDot || r.num == numFrac) && digit:
		r.num = numFrac
	case (r.num == numZero || r.num == numInt || r.num == numFrac) && exp:
		r.num = numE
	case r.num == numE && (c == '+' || c == '-'):
		r.num = numESign
	case (r.num == numE || r.num == numESign || r.num == numExp) && digit:
		r.num = numExp
	case r.num == numMinus || r.num == numDot || r.num == numE || r.num == numESign:
		r.syntax(c, "in a number")
	default: // the number ended before c
		r.st = sAfter
		r.step(c)
	}
}

package loop

import "github.com/mmcpd/mmcpd/pkg/schema"

// preview follows one attempt's reply while the model writes it, and emits
// the thought and the answer as they grow, so that a person reads them at
// the model's pace instead of after its last token. What it emits is a
// preview: the reply is still decoded and validated whole at the end, and
// when that fails after something was shown, the attempt is retracted.
type preview struct {
	t             *turn
	step, attempt int
	r             *schema.StreamReader
	shown         bool // a delta went out
}

// preview returns the preview of one attempt; nil when nobody watches the
// turn (its methods do nothing then).
func (t *turn) preview(step, attempt int) *preview {
	if t.obs == nil && t.Events == nil {
		return nil
	}
	return &preview{t: t, step: step, attempt: attempt, r: schema.NewStreamReader()}
}

// piece feeds the next piece of the reply and emits what it adds. Once the
// reader has stopped (the reply broke JSON, repeated a field), nothing more is
// shown: end retracts what was.
func (p *preview) piece(s string) {
	if p == nil || p.r.Err() != nil {
		return
	}
	p.r.Feed(s)
	if p.r.Err() != nil {
		return
	}
	if text := p.r.TakeThought(); text != "" {
		p.shown = true
		p.t.emit(Event{Type: EventThoughtDelta, Step: p.step, Attempt: p.attempt, Text: text})
	}
	if text := p.r.TakeAnswer(); text != "" {
		p.shown = true
		p.t.emit(Event{Type: EventAnswerDelta, Step: p.step, Attempt: p.attempt, Text: text})
	}
}

// end closes the attempt: valid says the whole reply decoded and validated.
// What was shown is retracted unless the reply is valid and the reader
// followed it to its end without error (then the deltas put together are its
// thought and answer).
func (p *preview) end(valid bool) {
	if p == nil || !p.shown {
		return
	}
	if valid && p.r.Done() && p.r.Err() == nil {
		return
	}
	p.t.emit(Event{Type: EventAnswerRetracted, Step: p.step, Attempt: p.attempt})
}

package sdk

import (
	"context"
	"errors"
	"testing"
)

func TestEncodeResultKeepsHTMLCharacters(t *testing.T) {
	b, err := encodeResult(struct {
		Title string `json:"title"`
	}{"Law & Order <SVU>"})
	if err != nil || string(b) != `{"title":"Law & Order <SVU>"}` {
		t.Errorf("encodeResult = %s, %v", b, err)
	}
}

type client struct{ calls int }

func (c *client) echo(_ context.Context, s string) (string, error) { c.calls++; return s, nil }

func TestMethod(t *testing.T) {
	c := &client{}
	if out, err := Method(c, nil, (*client).echo)(context.Background(), "hi"); out != "hi" || err != nil || c.calls != 1 {
		t.Errorf("Method = %q, %v after %d calls", out, err, c.calls)
	}
	setup := errors.New("MMCP_PLUGIN_X_URL is not an http(s) URL")
	if out, err := Method(c, setup, (*client).echo)(context.Background(), "hi"); out != "" || err != setup || c.calls != 1 {
		t.Errorf("Method with a setup error = %q, %v after %d calls", out, err, c.calls)
	}
}

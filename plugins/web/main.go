// Command mmcp-plugin-web is the bundled plugin that reads a page of the
// public web for the model: https only, never an address on the machine or
// the home network, with the page reduced to its readable text.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
)

const (
	version   = "1.0.0"
	envPrefix = "MMCP_PLUGIN_WEB_"
)

// settings are read from MMCP_PLUGIN_WEB_*; none is required.
type settings struct {
	MaxBytes int64         `split_words:"true" default:"1048576" desc:"most bytes of a page that are downloaded; the rest is left out and the result says so"`
	Timeout  time.Duration `default:"15s" desc:"time limit of one fetch with its redirects and download"`
	MaxChars int           `split_words:"true" default:"20000" desc:"most characters of text handed to the model"`
}

func main() {
	newPlugin(hooks{}).Serve()
}

// newPlugin declares the plugin with its settings read from the environment;
// h is for tests and is empty in production.
func newPlugin(h hooks) *sdk.Plugin {
	p := sdk.New("web", version)
	var cfg settings
	p.Settings(&cfg)
	f, err := newFetcher(cfg, h)
	if err != nil {
		p.SettingProblem(err.Error()) // standby, with the reason, in the daemon's listings
	}
	sdk.Tool(p, "web_fetch",
		"Read a public web page over https: its title and readable text (or the raw text of a non-HTML document). Addresses on this machine or the local network are refused",
		func(ctx context.Context, a fetchArgs) (json.RawMessage, error) {
			if err != nil {
				return nil, err
			}
			r, err := f.fetch(ctx, a)
			if err != nil {
				return nil, err
			}
			return encode(r)
		})
	return p
}

// encode is r as JSON with <, > and & left as they are: pages are full of
// them, and \u003c only costs the model tokens.
func encode(r fetchResult) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

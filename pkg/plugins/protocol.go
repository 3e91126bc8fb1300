// Package plugins owns out-of-process tools: finding plugin binaries, starting
// them over go-plugin, their environment and settings, calls with deadlines,
// restarts, breakers and context providers. Plugin authors use pkg/plugins/sdk.
package plugins

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

// Handshake is what the daemon and a plugin must agree on before anything
// else: a plugin built for another protocol version is refused at start.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "MMCP_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "mmcpd-tool-plugin-v1",
}

// PluginName is the name the service is dispensed under.
const PluginName = "tool"

// MaxMessageBytes bounds a gRPC message either way. A result over
// MaxResultBytes is cut anyway; this only has to leave room for it.
const MaxMessageBytes = 16 << 20

// MaxResultBytes is where the daemon cuts a tool result.
const MaxResultBytes = 1 << 20

// GRPCPlugin adapts the Plugin service to go-plugin on both sides: the SDK
// serves Impl, the host gets a client.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl pluginpb.PluginServer
}

// GRPCServer implements plugin.GRPCPlugin.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pluginpb.RegisterPluginServer(s, p.Impl)
	return nil
}

// GRPCClient implements plugin.GRPCPlugin.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return pluginpb.NewPluginClient(c), nil
}

// Slug is a plugin name as it appears in its variables: upper case, every
// character other than A-Z and 0-9 turned to "_".
func Slug(name string) string {
	b := []byte(name)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}

// EnvPrefix is the prefix of every variable of the plugin called name.
func EnvPrefix(name string) string { return "MMCP_PLUGIN_" + Slug(name) + "_" }

package plugins

import (
	"sort"

	"github.com/mmcpd/mmcpd/pkg/redact"
)

// Info is a plugin as GET /v1/plugins shows it. Secret values never appear.
type Info struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"` // KindPlugin or KindMCP
	Version string `json:"version,omitempty"`
	Path    string `json:"path"`
	Status  string `json:"status"`
	// State says whether a process runs: running, idle-stopped, standby,
	// failed or starting (see idle.go).
	State    string        `json:"state"`
	PID      int           `json:"pid,omitempty"`       // while running
	RSSBytes int64         `json:"rss_bytes,omitempty"` // resident memory, while running
	Reason   string        `json:"reason,omitempty"`
	Restarts int           `json:"restarts"`
	Tools    []ToolInfo    `json:"tools"`
	Settings []SettingInfo `json:"settings"`
	Contexts []string      `json:"context_providers"`
}

// ToolInfo is one tool of a plugin.
type ToolInfo struct {
	Name          string `json:"name"`
	Description   string `json:"description"`
	NeedsApproval bool   `json:"needs_approval,omitempty"`
	Changes       bool   `json:"changes,omitempty"` // never retried on its own
	TimeoutMs     int64  `json:"timeout_ms,omitempty"`
	Breaker       string `json:"breaker"`
	Disabled      string `json:"disabled,omitempty"`
}

// SettingInfo is one setting: its variable, and its value unless secret.
type SettingInfo struct {
	Variable    string `json:"variable"`
	Description string `json:"description,omitempty"`
	Required    bool   `json:"required,omitempty"`
	Secret      bool   `json:"secret,omitempty"`
	Default     string `json:"default,omitempty"`
	Set         bool   `json:"set"`
	Value       string `json:"value,omitempty"` // "**********" for a secret that is set
}

// Mask stands for a secret value wherever one would be shown.
const Mask = "**********"

// Plugins lists every plugin found, in name order.
func (h *Host) Plugins() []Info {
	h.mu.RLock()
	owner := make(map[string]*toolEntry, len(h.tools))
	for name, e := range h.tools {
		owner[name] = e
	}
	h.mu.RUnlock()

	out := make([]Info, 0, len(h.plugins))
	for _, m := range h.plugins {
		m.mu.Lock()
		info := Info{Name: m.name, Kind: KindPlugin, Path: m.path, Status: m.status, Reason: m.reason, Restarts: m.restarts,
			Tools: []ToolInfo{}, Settings: []SettingInfo{}, Contexts: []string{}}
		if m.mcp != nil {
			info.Kind, info.Settings = KindMCP, mcpSettings(m)
		}
		info.State = m.stateLocked()
		if m.proc != nil && !m.proc.exited() {
			info.PID = m.proc.pid
		}
		desc, refused := m.desc, m.refused
		m.mu.Unlock()
		info.RSSBytes = residentBytes(info.PID)
		if desc != nil {
			info.Version = desc.Version
			for _, s := range desc.Settings {
				v, ok := lookup(m.env, EnvPrefix(m.name)+s.Key)
				si := SettingInfo{Variable: EnvPrefix(m.name) + s.Key, Description: s.Description, Required: s.Required, Secret: s.Secret, Default: s.Default, Set: ok && v != ""}
				switch {
				case !si.Set:
				case s.Secret:
					si.Value = Mask
				default:
					// A URL may carry credentials of its own (user:pass@, ?apikey=).
					si.Value = redact.URL(v)
				}
				info.Settings = append(info.Settings, si)
			}
			for _, c := range desc.Contexts {
				info.Contexts = append(info.Contexts, c.Key)
			}
			for _, t := range desc.Tools {
				ti := ToolInfo{Name: t.Name, Description: t.Description, NeedsApproval: t.NeedsApproval, Changes: t.Changes || t.NeedsApproval, TimeoutMs: t.TimeoutMs}
				e, ok := owner[t.Name]
				switch {
				case refused[t.Name] != "":
					ti.Disabled = refused[t.Name]
				case !ok:
					ti.Disabled = "not registered: the plugin declared it after its first start"
				case len(e.clash) > 1:
					ti.Disabled = h.disabled(e)
				case e.plugin != m:
					ti.Disabled = "refused: plugin " + e.plugin.name + " has a tool with this name"
				default:
					ti.Breaker = h.opts.Breakers.State(t.Name)
					ti.Disabled = h.disabled(e)
					ti.NeedsApproval = e.needsApproval
					ti.Changes = ti.Changes || e.needsApproval
				}
				info.Tools = append(info.Tools, ti)
			}
			sort.Slice(info.Tools, func(i, j int) bool { return info.Tools[i].Name < info.Tools[j].Name })
		}
		out = append(out, info)
	}
	return out
}

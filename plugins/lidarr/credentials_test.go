package main

import (
	"testing"

	"github.com/mmcpd/mmcpd/plugins/internal/arr/arrtest"
)

// TestURLCredentialsStayOut: credentials written into MMCP_PLUGIN_LIDARR_URL
// itself (an ?apikey=, a user's password) never reach the tool error the
// model reads, nor the probe's reason, however Lidarr fails.
func TestURLCredentialsStayOut(t *testing.T) {
	arrtest.URLCredentials(t, "lidarr", newPlugin, "lidarr_lookup", `{"term":"wet leg"}`)
}

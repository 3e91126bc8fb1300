package main

import (
	"testing"

	"github.com/mmcpd/mmcpd/plugins/internal/arr/arrtest"
)

func TestHealth(t *testing.T) {
	arrtest.Health(t, "prowlarr", newPlugin)
}

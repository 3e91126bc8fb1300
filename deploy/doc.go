// Package deploy holds the ways to install mmcpd (container image, compose
// file, systemd unit, settings file) and, in its tests, the checks that they
// stay valid and agree with the daemon's settings.
package deploy

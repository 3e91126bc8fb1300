//go:build !linux

package main

import "os"

// terminal is false outside Linux: the status line of chat and respond is
// left out there.
func terminal(*os.File) bool { return false }

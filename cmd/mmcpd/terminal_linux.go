package main

import (
	"os"
	"syscall"
	"unsafe"
)

// terminal reports whether f is a terminal: it answers the terminal's own
// request (TCGETS), which a pipe, a file or /dev/null does not.
func terminal(f *os.File) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}

package main

import (
	"errors"
	"flag"
	"io"

	"github.com/mmcpd/mmcpd/pkg/config"
)

// configCommand prints the effective configuration, or with --env-example
// the settings file deploy/ ships, which needs no valid environment.
func configCommand(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	example := fs.Bool("env-example", false, "print every variable, commented, with its default and description (deploy/mmcpd.env.example)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() != 0 {
		return usageError{errors.New("config takes no arguments besides --env-example")}
	}
	if *example {
		return config.EnvExample(stdout)
	}
	return printConfig(stdout)
}

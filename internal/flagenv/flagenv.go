// Package flagenv lets environment variables supply flag defaults, so one
// name works on the command line, in docker-compose and in Terraform's user
// data: flag -queue-url is FLEETSCRIBE_QUEUE_URL.
package flagenv

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// Name returns the environment variable for a flag name under prefix.
func Name(prefix, flagName string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Apply sets every flag of fs whose variable is set in the environment.
// Call it after registering flags and before fs.Parse, so the command line
// still wins. lookup is os.LookupEnv in production.
func Apply(fs *flag.FlagSet, prefix string, lookup func(string) (string, bool)) error {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil {
			return
		}
		name := Name(prefix, f.Name)
		if v, ok := lookup(name); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("environment %s=%q: %w", name, v, serr)
			}
		}
	})
	return err
}

// Usage prints the flags of fs with their environment variables.
func Usage(fs *flag.FlagSet, prefix, summary string) func() {
	return func() {
		out := fs.Output()
		fmt.Fprintf(out, "%s\n\nFlags (each also read from the environment variable shown):\n", summary)
		fs.VisitAll(func(f *flag.Flag) {
			def := ""
			if f.DefValue != "" {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(out, "  -%s  [%s]\n      %s%s\n", f.Name, Name(prefix, f.Name), f.Usage, def)
		})
	}
}

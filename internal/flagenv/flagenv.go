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

// Section is a titled group of flags: Register registers them.
type Section struct {
	Title    string
	Register func(*flag.FlagSet)
}

// Layout is which flags each section registered, in order.
type Layout struct {
	titles []string
	flags  [][]string
}

// Register registers each section's flags on fs, in order, and returns
// which flags each registered (alphabetical within a section, as -help has
// always listed them).
func Register(fs *flag.FlagSet, sections ...Section) Layout {
	var l Layout
	for _, s := range sections {
		seen := map[string]bool{}
		fs.VisitAll(func(f *flag.Flag) { seen[f.Name] = true })
		s.Register(fs)
		var names []string
		fs.VisitAll(func(f *flag.Flag) {
			if !seen[f.Name] {
				names = append(names, f.Name)
			}
		})
		l.titles = append(l.titles, s.Title)
		l.flags = append(l.flags, names)
	}
	return l
}

// All is one untitled section of every flag of fs, for commands whose
// flags need no sections.
func All(fs *flag.FlagSet) Layout {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return Layout{titles: []string{""}, flags: [][]string{names}}
}

// Help is a flag's usage split into its one-line help and the rationale
// after the first newline (for the configuration reference).
func Help(usage string) (line, rationale string) {
	line, rationale, _ = strings.Cut(usage, "\n")
	return line, strings.TrimSpace(rationale)
}

// Usage prints the flags of fs by section, each with its environment
// variable and one-line help.
func Usage(fs *flag.FlagSet, prefix, summary string, l Layout) func() {
	return func() {
		out := fs.Output()
		fmt.Fprintf(out, "%s\n\nFlags (each also read from the environment variable shown):\n", summary)
		for i, title := range l.titles {
			if title != "" {
				fmt.Fprintf(out, "\n%s:\n", title)
			}
			for _, name := range l.flags[i] {
				f := fs.Lookup(name)
				line, _ := Help(f.Usage)
				def := ""
				if f.DefValue != "" {
					def = fmt.Sprintf(" (default %s)", f.DefValue)
				}
				fmt.Fprintf(out, "  -%s  [%s]\n      %s%s\n", f.Name, Name(prefix, f.Name), line, def)
			}
		}
	}
}

// Reference renders the flags of fs by section as Markdown tables: flag,
// environment variable, default, and the whole help, rationale included.
func Reference(fs *flag.FlagSet, prefix string, l Layout) string {
	var b strings.Builder
	for i, title := range l.titles {
		fmt.Fprintf(&b, "\n## %s\n\n| flag | environment | default | what it does |\n|---|---|---|---|\n", title)
		for _, name := range l.flags[i] {
			f := fs.Lookup(name)
			line, why := Help(f.Usage)
			text := line
			if why != "" {
				text += ". " + why
			}
			def := "`" + f.DefValue + "`"
			if f.DefValue == "" {
				def = ""
			}
			fmt.Fprintf(&b, "| `-%s` | `%s` | %s | %s |\n", f.Name, Name(prefix, f.Name), strings.ReplaceAll(def, "|", "\\|"), strings.ReplaceAll(text, "|", "\\|"))
		}
	}
	return b.String()
}

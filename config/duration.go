package config

import "time"

// String returns d as a Go duration ("1m0s").
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes d as a Go duration.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a Go duration ("250ms", "30s"). A bare number is an
// error that suggests the unit.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Package config reads the queuebox configuration file into a
// typed Config, in four steps, each of which reports every problem it finds
// rather than the first:
//
//  1. Expansion. ${VAR} and ${VAR:-default} are replaced with values from
//     the environment, in the text, before it is parsed; $$ is a literal $.
//     Comments are not expanded. An unset variable without a default is an
//     error naming the variable and its line.
//  2. Decoding. The YAML syntax tree is decoded over Default() by this
//     package itself, strictly: an unknown key (with the near miss
//     suggested), a key written twice and a value of the wrong kind are
//     errors that name the full path, such as
//     "relay.batchsize: unknown key (did you mean "batchSize"?)".
//     Anchors, aliases and merge keys (<<) work as in YAML 1.1.
//  3. Defaults that depend on other keys: relay.reapInterval, a timeout of
//     10s for each destination, kafka key "{{ key }}", amqp routingKey
//     "{{ topic }}" and exchangeType "topic". A key written as zero stays
//     zero (and validation refuses it); only absent keys are defaulted.
//  4. Validation: enumerations, positive numbers and durations, required
//     keys per destination type, keys of another type, address templates
//     (address.ParseTemplate), topic patterns (address.ParsePattern) and
//     route destinations. Problems that do not stop the relay, such as a
//     destination no route uses, are kept as Warnings.
//
// Errors are an Errors value, sorted by position, one per line in the form
// "file:line:col: path: message". Secrets (the database password, tokens,
// HTTP credentials) never appear in an error, in String or in Redacted.
//
// docs/configuration.md is the reference of every key.
package config

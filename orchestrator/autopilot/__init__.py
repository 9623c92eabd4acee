"""The autopilot: profile, advise, run the top sweep, promote a confirmed retain, repeat."""

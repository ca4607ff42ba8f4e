"""The web app's pieces: functions of typed values (a ProfileReport, a Diagnosis, a diff, an EvalResult) that render
them and return what the person chose. No component touches the store or runs anything."""

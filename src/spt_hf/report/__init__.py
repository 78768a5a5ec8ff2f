"""`spt-hf report`: finished runs read back (`rows`), paired over seeds (`statistics`), written as tables
(`comparison`) and figures (`plots`), with the tuning section of a tuned comparison (`tuning`)."""

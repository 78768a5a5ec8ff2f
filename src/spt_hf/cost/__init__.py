"""What training costs, counted on real steps: the FLOP formulas (`flops`), one step measured without training
(`measure`: FLOPs and activation memory), and what a finished phase cost (`compute`)."""
